package dlm

// RenewBatchForTest exposes renewBatch to the external tests.
const RenewBatchForTest = renewBatch
