package strategy

import (
	"testing"
	"time"

	"github.com/dlmgo/dlm/internal/eval"
)

// DriftMarginForTest is the default drift margin of a lease of ttl.
func DriftMarginForTest(ttl time.Duration) time.Duration {
	c := defaultConfig()
	return c.driftMargin(ttl)
}

// Before60ForTest makes acquisitions, until t ends, see the Lua API of a
// server before Redis 6.0 (no redis.setresp; run it on a server before
// 7.0, which has no redis.REDIS_VERSION_NUM either and lets a script
// change the redis table): there is no such server to test on here.
func Before60ForTest(t testing.TB) {
	old := acquireScript
	acquireScript = eval.NewScript("redis.setresp = nil\n" + old.Source())
	t.Cleanup(func() { acquireScript = old })
}

// The strategies' types, for tests that call what driver.Strategy does not
// show (Quorum, Probe, Inspect, ...): a constructor's result asserted to
// one of them.
type (
	Single   = single
	Failover = failover
	Redlock  = redlock
)

// The errors' types and a node's outcomes, for tests that read them.
type (
	QuorumError = quorumError
	NodeError   = nodeError
	AckError    = ackError
	HeldError   = heldError
	NodeResult  = nodeResult
	Outcome     = outcome
	ServerInfo  = serverInfo
)

const (
	Pending = outcomePending
	Granted = outcomeGranted
	Refused = outcomeRefused
	Failed  = outcomeFailed
)

// DefaultNodeTimeoutForTest is a Redlock's per-node timeout before it
// learns its nodes' latency.
const DefaultNodeTimeoutForTest = defaultNodeTimeout

// ScriptSourcesForTest returns the scripts a Redlock runs, for tests that
// load them into a server beforehand (SCRIPT LOAD) so that a first call
// does not pay for EVALSHA's fallback to EVAL.
func ScriptSourcesForTest() []string {
	out := []string{acquireScript.Source(), extendScript.Source(), fenceScript.Source(), serverIDScript.Source()}
	for _, r := range releaseScripts {
		out = append(out, r.Source())
	}
	return out
}
