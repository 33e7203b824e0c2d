// Package conformance checks that a [driver.Node] (a driver) or a
// [driver.Strategy] keeps the rules dlm relies on, against a real Redis server.
//
// A driver's tests run the suite through package conformance/harness,
// which starts a redis-server of its own behind a fault proxy and hands the
// driver its address:
//
//	func TestConformance(t *testing.T) {
//		harness.Run(t, func(t *testing.T, addr string) driver.Node {
//			n := mydriver.New(addr) // a new client of addr
//			t.Cleanup(n.Close)
//			return n
//		})
//	}
//
// RunNode itself serves deployments the harness cannot start (a Cluster,
// Sentinel); the rules that need the suite to own the server, its replica
// and the path to it (NoRetry, DialDeadline, PermanentErrors,
// RunWaitFrozenReplica, WatchResubscribes, WatchDialDeadline, TLS) then skip, or
// run on a server of the harness's when harness.Own was called first.
// RunStrategy checks a locking algorithm over nodes of any deployment.
// docs/driver-contract.md states the driver contract these rules check, in
// one place.
//
// Every rule is a subtest named after it, so a failure names the rule that
// broke ("TestConformance/SetNX", and "TestConformance/SetNX/fresh" for the
// node it broke on). Each subtest uses keys of its own (all in
// one Redis Cluster hash slot, expiring within a minute) and runs under a
// watchdog: a call that ignores its context makes the test binary fail with
// the rule's name instead of hanging (after 60s, or the duration in
// DLM_CONFORMANCE_WATCHDOG). The rules of Node.RunWait and Node.Watch, and
// of Strategy.WatchRelease, are skipped with the reason when the method
// reports errors.ErrUnsupported.
//
// RunNode briefly blocks the server it talks to (a Lua script that
// busy-waits 1.5 seconds, up to about 4 on a slow machine) to check that
// deadlines and cancellation are enforced while the server does not answer,
// so point it at a server used only by tests.
//
// The fault wrappers ([FaultyNode], [Down], [Slow], [ReplyLost]) work around
// any Node, in this suite and in a user's own tests. Every method of a Node
// is part of its contract, so a wrapper of one's own keeps them all by
// embedding the Node and overriding only what it changes:
//
//	type counted struct {
//		driver.Node
//		runs atomic.Int64
//	}
//
//	func (c *counted) Run(ctx context.Context, calls []driver.Call) {
//		c.runs.Add(1)
//		c.Node.Run(ctx, calls)
//	}
//
// The package imports only the standard library, dlm and dlm/nodekit; the
// harness, which needs a fault proxy, is a package of its own.
package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/conformance/internal/suite"
)

// Bounds of the suite. A healthy call on a loaded machine takes
// milliseconds; these leave room for a slow CI machine.
const (
	// callTimeout bounds every call the suite makes that is not about timing.
	callTimeout = 10 * time.Second
)

// WatchdogEnv names the environment variable that overrides how long one
// rule may run before the watchdog ends the test binary (a Go duration,
// default 60s).
const WatchdogEnv = suite.WatchdogEnv

// runID makes keys and script sources unique to one run of a suite.
func runID() string { return suite.RunID() }

// keyspace hands out keys for one subtest, all in one hash slot.
type keyspace struct{ prefix string }

func newKeyspace(run string) keyspace { return keyspace{prefix: suite.Prefix(run)} }

func (k keyspace) key(name string) string { return k.prefix + name }

// ctx returns a context bounded by callTimeout.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// subtest runs f as a subtest under the watchdog.
func subtest(t *testing.T, name string, f func(t *testing.T)) bool {
	return suite.Subtest(t, name, f)
}

// quote shows binary strings readably in failure messages.
func quote(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%q… (%d bytes)", s[:60], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func ints(xs []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i == 40 {
			fmt.Fprintf(&b, "… (%d values)", len(xs))
			break
		}
		fmt.Fprint(&b, x)
	}
	b.WriteByte(']')
	return b.String()
}
