package strategy

import "time"

// DriftMarginForTest is the default drift margin of a lease of ttl.
func DriftMarginForTest(ttl time.Duration) time.Duration {
	c := defaultConfig()
	return c.driftMargin(ttl)
}

// WithoutMergingForTest coalesces calls without merging them into batch
// scripts: what BenchmarkCoalescing compares merging against.
func WithoutMergingForTest() Option {
	return func(c *config) error {
		c.noMerge = true
		return nil
	}
}
