package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// A Topology supplies the nodes a strategy runs over.
type Topology struct {
	// Nodes returns the nodes for one subtest; it is called once per
	// subtest and may return Nodes over shared clients and servers. It may
	// use t (t.Cleanup, t.Fatal).
	Nodes func(t *testing.T) []driver.Node
	// Quorum is how many nodes must take part for the strategy to grant a
	// lock: 1 for a single endpoint, a majority for Redlock. Zero means a
	// majority, len(nodes)/2 + 1.
	Quorum int
	// Servers lists the address (host:port) of every server the nodes
	// send scripts to (each master of a Cluster, the primary behind
	// Sentinel). Before each rule RunStrategy sends them SCRIPT FLUSH, on a
	// connection of its own and without authentication, so that the
	// strategy's scripts meet NOSCRIPT and the drivers' fallback runs. It
	// is required.
	Servers []string
}

// RunStrategy checks that the strategies newStrategy builds keep every rule
// of the driver.Strategy contract, each in a subtest named after the rule.
// Before calling newStrategy it wraps every node in a [FaultyNode], whose
// faults apply to every Node method, and it injects faults through those
// wrappers:
//
//   - MutualExclusion: a held key is refused to another token with an error
//     matching dlm.ErrNotAcquired, and granted to it after release.
//   - OneWinner: of 32 tokens racing for one key, at most one wins; when
//     none does (split votes), another token gets the key within a second.
//   - Reacquire: the holder's token acquires again (a lost reply may be retried).
//   - Lease: Until lies between the call's return and its start plus the TTL.
//   - Expiry: a lock whose TTL passed is granted to another token.
//   - ExtendOwnerOnly: only the holder extends; the lease moves forward.
//   - ExtendAfterExpiry: extending an expired lock fails with dlm.ErrNotHeld.
//   - ReleaseOwnerOnly: only the holder releases; a second release fails
//     with dlm.ErrNotHeld.
//   - FencesIncrease: fences grow strictly across acquisitions, also after
//     expiry.
//   - InvalidArguments: empty key or token and a zero TTL fail with
//     dlm.ErrInvalid, without a panic.
//   - DownTolerated, DownBeyondQuorum: with as many nodes down as the quorum
//     allows the lock is granted; with one more it is refused, and nothing
//     is left behind that blocks the next owner once the nodes are back
//     (the strategy may undo its partial work in the background, within a
//     second).
//   - ReplyLostTolerated, ReplyLostBeyondQuorum: the same with nodes that
//     apply commands and lose the replies; the strategy undoes writes it
//     never saw answered.
//   - SlowBeyondDeadline: with too many nodes slower than the context
//     allows, Acquire returns near the deadline, refused, and the key is
//     granted within a second once the nodes are back.
//   - SlowLease: the lease counts from before the request, so a slow node
//     shortens it.
//   - BatchExtend: ExtendMany extends the locks the token holds and, lock by
//     lock, refuses the others (dlm.ErrNotHeld) and bad input (dlm.ErrInvalid).
//   - WatchRelease: a release calls notify within a second; a cancelled
//     context fails.
//   - Handoff (a strategy that is a driver.Handoff): the holder's lock passes
//     to a new token with a greater fence and a lease counted from before
//     the call; the old token can neither extend nor release it; a
//     hand-off from a token that does not hold the key (held by another,
//     or free) fails with dlm.ErrNotHeld and changes nothing; empty or
//     equal tokens are dlm.ErrInvalid.
//
// Two rules run a dlm.Manager over the strategy:
//
//   - InspectRevoke (a strategy that is an inspect.Inspector): Inspect names the
//     holder, its fence and lease, and counts a waiting process; Revoke
//     ends the holder's Context with dlm.ErrRevoked at its next renewal,
//     wakes the waiter, whose fence is at least two above, and leaves a
//     note on a quorum of nodes.
//   - UnlockAt: Lock.UnlockAt(now+500ms), which extends with a TTL shorter
//     than the lease's, ends the Lock's Context at once and keeps the key
//     from another Manager and from a Lock call of the same Manager until
//     then; the holder's TTL that a refusal reports (over one node), and
//     for an inspect.Inspector the servers' TTL until the key is gone,
//     stay within the time left (Extend shortens a TTL; no renewal
//     lengthens it).
//
// The lock family's rules (packages semaphore, multilock and rwlock) are
// package conformance/family's (family.Run), so that this package does not
// compile the family: run both over a strategy.
//
// Rules that need more nodes than the topology can lose are skipped with the
// reason (a single endpoint tolerates no failed node), and so are
// WatchRelease when it reports errors.ErrUnsupported, Handoff for a
// strategy that is not a driver.Handoff, and InspectRevoke for a strategy that
// is not an inspect.Inspector.
//
// Each rule begins with the servers' script caches flushed, so its first
// call of each script takes the NOSCRIPT path (EVALSHA, then EVAL): a
// strategy must allow for that round trip. Redlock's default per-node
// timeout (50ms) does, but SlowLease delays every node by 300ms and wants
// a lock, so Redlock needs a per-node timeout above that (the repository
// runs it with strategy.WithTimeout(time.Second)).
func RunStrategy(t *testing.T, topology Topology, newStrategy func(nodes []driver.Node) (driver.Strategy, error)) {
	t.Helper()
	if topology.Nodes == nil || newStrategy == nil {
		t.Fatal("conformance.RunStrategy: nil Topology.Nodes or newStrategy")
	}
	if len(topology.Servers) == 0 {
		t.Fatal("conformance.RunStrategy: Topology.Servers is empty; list the servers, so that the suite can flush their script caches and the NOSCRIPT path runs")
	}
	for i, addr := range topology.Servers {
		if reply, err := transport.Do(addr, callTimeout, "PING"); err != nil || reply != "PONG" {
			t.Fatalf("conformance.RunStrategy: Topology.Servers[%d] (%s) does not answer PING on a connection of the suite's own, without authentication (reply %q, error %v): list the address of every server the nodes send scripts to", i, addr, reply, err)
		}
	}
	run := runID()
	for _, rule := range strategyRules {
		subtest(t, rule.name, func(t *testing.T) {
			for _, addr := range topology.Servers {
				if reply, err := transport.Do(addr, callTimeout, "SCRIPT", "FLUSH"); err != nil || reply != "OK" {
					t.Fatalf("SCRIPT FLUSH on %s: reply %q, error %v", addr, reply, err)
				}
			}
			nodes := topology.Nodes(t)
			if len(nodes) == 0 {
				t.Fatal("Topology.Nodes returned no nodes")
			}
			c := &strategyCase{keyspace: newKeyspace(run), quorum: topology.Quorum}
			if c.quorum == 0 {
				c.quorum = len(nodes)/2 + 1
			}
			if c.quorum > len(nodes) {
				t.Fatalf("Topology.Quorum %d exceeds the %d nodes", c.quorum, len(nodes))
			}
			wrapped := make([]driver.Node, len(nodes))
			for i, n := range nodes {
				c.faulty = append(c.faulty, Wrap(n))
				wrapped[i] = c.faulty[i]
			}
			s, err := newStrategy(wrapped)
			if err != nil {
				t.Fatalf("newStrategy: %v", err)
			}
			c.Strategy = s
			rule.run(t, c)
		})
	}
}

type strategyCase struct {
	driver.Strategy
	keyspace
	faulty []*FaultyNode
	quorum int
}

// tolerated is how many nodes may fail while locks are still granted.
func (c *strategyCase) tolerated() int { return len(c.faulty) - c.quorum }

// inject sets fault on the first n nodes and heals the rest.
func (c *strategyCase) inject(n int, fault Fault) {
	for i, f := range c.faulty {
		if i < n {
			f.Set(fault)
		} else {
			f.Heal()
		}
	}
}

func (c *strategyCase) acquire(t *testing.T, key, token string, ttl time.Duration) driver.Lease {
	t.Helper()
	l, err := c.Acquire(ctx(t), key, token, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q, %v): %v", key, token, ttl, err)
	}
	return l
}

// acquireShort is acquire for a lease of a short TTL (a second or less),
// which a loaded machine may use up before the strategy
// grants it (Redlock refuses a lease whose validity the calls used up): an
// Acquire refused with dlm.ErrNotAcquired after taking half the TTL or
// more is made again, once what it granted expired, up to 10 times; one
// refused sooner fails t, as acquire does.
func (c *strategyCase) acquireShort(t *testing.T, key, token string, ttl time.Duration) driver.Lease {
	t.Helper()
	for attempt := 1; ; attempt++ {
		start := time.Now()
		l, err := c.Acquire(ctx(t), key, token, ttl)
		took := time.Since(start)
		if err == nil {
			return l
		}
		if !errors.Is(err, dlm.ErrNotAcquired) || took < ttl/2 || attempt == 10 {
			t.Fatalf("Acquire(%q, %q, %v) (attempt %d, %v): %v", key, token, ttl, attempt, took.Round(time.Millisecond), err)
		}
		t.Logf("Acquire(%q, %q, %v) was refused after %v, the machine being slow: trying again once what it granted expired (%v)", key, token, ttl, took.Round(time.Millisecond), err)
		time.Sleep(time.Until(start.Add(ttl + 50*time.Millisecond)))
	}
}

func (c *strategyCase) refused(t *testing.T, key, token string, ttl time.Duration, why string) {
	t.Helper()
	l, err := c.Acquire(ctx(t), key, token, ttl)
	if err == nil {
		t.Fatalf("Acquire(%q, %q) granted %+v %s", key, token, l, why)
	}
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Errorf("Acquire(%q, %q) %s: error %v does not match dlm.ErrNotAcquired", key, token, why, err)
	}
}

type strategyRule struct {
	name string
	run  func(t *testing.T, c *strategyCase)
}

var strategyRules = []strategyRule{
	{"MutualExclusion", testMutualExclusion},
	{"OneWinner", testStrategyOneWinner},
	{"Reacquire", testReacquire},
	{"Lease", testLease},
	{"Expiry", testStrategyExpiry},
	{"ExtendOwnerOnly", testExtendOwnerOnly},
	{"ExtendAfterExpiry", testExtendAfterExpiry},
	{"ReleaseOwnerOnly", testReleaseOwnerOnly},
	{"FencesIncrease", testFencesIncrease},
	{"InvalidArguments", testInvalidArguments},
	{"Handoff", testHandoff},
	{"DownTolerated", faultTolerated(Fault{Down: true})},
	{"DownBeyondQuorum", faultBeyondQuorum(Fault{Down: true})},
	{"ReplyLostTolerated", faultTolerated(Fault{LoseReply: true})},
	{"ReplyLostBeyondQuorum", faultBeyondQuorum(Fault{LoseReply: true})},
	{"SlowBeyondDeadline", testSlowBeyondDeadline},
	{"SlowLease", testSlowLease},
	{"BatchExtend", testBatchExtend},
	{"WatchRelease", testWatchRelease},
	{"InspectRevoke", testInspectRevoke},
	{"UnlockAt", testUnlockAt},
}

const ttl = 10 * time.Second

func testMutualExclusion(t *testing.T, c *strategyCase) {
	k := c.key("k")
	c.acquire(t, k, "A", ttl)
	c.refused(t, k, "B", ttl, "while A holds it")
	if err := c.Release(ctx(t), k, "A"); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	c.acquire(t, k, "B", ttl)
	c.refused(t, k, "A", ttl, "while B holds it")
	if err := c.Release(ctx(t), k, "B"); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
}

func testStrategyOneWinner(t *testing.T, c *strategyCase) {
	const n = 32
	k := c.key("k")
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		wins  []string
		errs  []error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			cx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			token := "T" + strconv.Itoa(i)
			_, err := c.Acquire(cx, k, token, ttl)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins = append(wins, token)
			case !errors.Is(err, dlm.ErrNotAcquired):
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(wins) > 1 {
		t.Fatalf("%d tokens raced for one key and %d won: %v", n, len(wins), wins)
	}
	if len(errs) > 0 {
		t.Errorf("refusals that do not match dlm.ErrNotAcquired: %v", errors.Join(errs...))
	}
	if len(wins) == 0 {
		// A strategy may refuse everyone under contention (Redlock split
		// votes), but with healthy nodes someone must then get it, long
		// before the losers' TTL: a loser may still be undoing grants whose
		// replies came after it had given up.
		c.acquireSettled(t, k, "late", "after a race nobody won")
	}
}

// settleTime bounds how long a strategy may take to undo a failed
// acquisition in the background.
const settleTime = time.Second

// acquireSettled acquires key for token with healthy nodes, retrying for up
// to settleTime while the strategy may still be undoing a failed
// acquisition in the background; after, the key must be granted.
func (c *strategyCase) acquireSettled(t *testing.T, key, token, after string) {
	t.Helper()
	deadline := time.Now().Add(settleTime)
	for {
		_, err := c.Acquire(ctx(t), key, token, ttl)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, the key was still refused to %s %v later: %v; the strategy must undo its partial work, on nodes whose reply it never saw too", after, token, settleTime, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testReacquire(t *testing.T, c *strategyCase) {
	k := c.key("k")
	first := c.acquire(t, k, "A", ttl)
	again := c.acquire(t, k, "A", ttl)
	if again.Fence < first.Fence {
		t.Errorf("reacquiring with the holder's token moved the fence back: %d then %d", first.Fence, again.Fence)
	}
	c.refused(t, k, "B", ttl, "after A reacquired it")
}

func testLease(t *testing.T, c *strategyCase) {
	before := time.Now()
	l := c.acquire(t, c.key("k"), "A", ttl)
	after := time.Now()
	if l.Until.After(before.Add(ttl)) {
		t.Errorf("Until %v is later than the request's start plus the TTL (%v): the lease must count from before the request", l.Until.Sub(before), ttl)
	}
	if !l.Until.After(after) {
		t.Errorf("the lease granted is already over: Until is %v before Acquire returned", after.Sub(l.Until))
	}
	if d := before.Add(ttl).Sub(l.Until); d > ttl/2 {
		t.Errorf("Until is %v short of start+TTL with healthy nodes; the drift margin should be far smaller", d)
	}
	l2, err := c.Extend(ctx(t), c.key("k"), "A", ttl)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if l2.Until.After(time.Now().Add(ttl)) {
		t.Errorf("extended Until is later than now plus the TTL")
	}
}

// waitExpired acquires key for token with a lease of ttl, retrying until
// the lock of a previous owner with a TTL of prev has expired.
func waitExpired(t *testing.T, c *strategyCase, key, token string, prev, ttl time.Duration) driver.Lease {
	t.Helper()
	deadline := time.Now().Add(prev + 5*time.Second)
	for {
		l, err := c.Acquire(ctx(t), key, token, ttl)
		if err == nil {
			return l
		}
		if !errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("Acquire after expiry: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a lock with a %v TTL was still refused to another token after %v: %v", prev, prev+5*time.Second, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testStrategyExpiry(t *testing.T, c *strategyCase) {
	k := c.key("k")
	const short = 200 * time.Millisecond
	c.acquireShort(t, k, "A", short)
	waitExpired(t, c, k, "B", short, ttl) // B's lease outlasts a slow refused call of A's
	c.refused(t, k, "A", ttl, "after its lease expired and B took the key")
}

func testExtendOwnerOnly(t *testing.T, c *strategyCase) {
	k := c.key("k")
	const short = time.Second
	l := c.acquireShort(t, k, "A", short)
	if _, err := c.Extend(ctx(t), k, "B", ttl); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Extend by a token that does not hold the key: error %v, want one matching dlm.ErrNotHeld", err)
	}
	l2, err := c.Extend(ctx(t), k, "A", ttl)
	if err != nil {
		t.Fatalf("Extend by the holder: %v", err)
	}
	if !l2.Until.After(l.Until) {
		t.Errorf("Extend to %v did not move Until forward from the %v lease", ttl, short)
	}
	if l2.Fence != l.Fence {
		t.Errorf("Extend changed the fence from %d to %d", l.Fence, l2.Fence)
	}
	time.Sleep(short + 200*time.Millisecond) // past the first TTL, within the extended one
	c.refused(t, k, "B", ttl, "after A extended its lease")
}

func testExtendAfterExpiry(t *testing.T, c *strategyCase) {
	k := c.key("k")
	const short = 200 * time.Millisecond
	c.acquireShort(t, k, "A", short)
	time.Sleep(short + 300*time.Millisecond)
	if _, err := c.Extend(ctx(t), k, "A", ttl); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Extend of an expired lock: error %v, want one matching dlm.ErrNotHeld", err)
	}
	if _, err := c.Extend(ctx(t), c.key("never"), "A", ttl); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Extend of a key never locked: error %v, want one matching dlm.ErrNotHeld", err)
	}
}

func testReleaseOwnerOnly(t *testing.T, c *strategyCase) {
	k := c.key("k")
	c.acquire(t, k, "A", ttl)
	if err := c.Release(ctx(t), k, "B"); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Release by a token that does not hold the key: error %v, want one matching dlm.ErrNotHeld", err)
	}
	c.refused(t, k, "B", ttl, "after B tried to release A's lock")
	if err := c.Release(ctx(t), k, "A"); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	if err := c.Release(ctx(t), k, "A"); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("second Release: error %v, want one matching dlm.ErrNotHeld", err)
	}
}

func testFencesIncrease(t *testing.T, c *strategyCase) {
	k := c.key("k")
	var last uint64
	for i := range 5 {
		token := "T" + strconv.Itoa(i)
		l := c.acquire(t, k, token, ttl)
		if i > 0 && l.Fence <= last {
			t.Errorf("acquisition %d got fence %d after %d; fences must increase strictly", i+1, l.Fence, last)
		}
		last = l.Fence
		if err := c.Release(ctx(t), k, token); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	const short = 200 * time.Millisecond
	e := c.acquireShort(t, k, "expiring", short)
	if e.Fence <= last {
		t.Errorf("fence %d after %d; fences must increase strictly", e.Fence, last)
	}
	l := waitExpired(t, c, k, "after-expiry", short, short)
	if l.Fence <= e.Fence {
		t.Errorf("after a lease with fence %d expired, the next owner got fence %d; fences must increase strictly", e.Fence, l.Fence)
	}
}

// testHandoff checks a driver.Handoff: the lock passes from its holder to a
// new token in one step, with a greater fence, and only from its holder.
func testHandoff(t *testing.T, c *strategyCase) {
	h, ok := c.Strategy.(driver.Handoff)
	if !ok {
		t.Skip("the strategy is not a driver.Handoff")
	}
	k := c.key("k")
	a := c.acquire(t, k, "A", ttl)
	before := time.Now()
	b, err := h.Handoff(ctx(t), k, "A", "B", ttl)
	if err != nil {
		t.Fatalf("Handoff from the holder: %v", err)
	}
	if b.Fence <= a.Fence {
		t.Errorf("Handoff gave fence %d after the holder's %d; fences must increase strictly", b.Fence, a.Fence)
	}
	if b.Until.After(before.Add(ttl)) || !b.Until.After(time.Now()) {
		t.Errorf("Handoff's lease ends %v after its start; want within (now, start+TTL]", b.Until.Sub(before))
	}
	if _, err := c.Extend(ctx(t), k, "A", ttl); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Extend by the token that handed the lock off: error %v, want one matching dlm.ErrNotHeld", err)
	}
	if err := c.Release(ctx(t), k, "A"); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Release by the token that handed the lock off: error %v, want one matching dlm.ErrNotHeld", err)
	}
	c.refused(t, k, "C", ttl, "after A handed it to B")
	if _, err := c.Extend(ctx(t), k, "B", ttl); err != nil {
		t.Fatalf("Extend by the token the lock was handed to: %v", err)
	}

	_, err = h.Handoff(ctx(t), k, "A", "C", ttl)
	if !errors.Is(err, dlm.ErrNotHeld) || !errors.Is(err, dlm.ErrNotAcquired) {
		t.Errorf("Handoff from a token that does not hold the key: error %v, want one matching dlm.ErrNotHeld and dlm.ErrNotAcquired", err)
	}
	if _, err := c.Extend(ctx(t), k, "B", ttl); err != nil {
		t.Fatalf("after a refused Handoff, Extend by the holder: %v", err)
	}
	if err := c.Release(ctx(t), k, "B"); err != nil {
		t.Fatalf("Release by the token the lock was handed to: %v", err)
	}
	if _, err := h.Handoff(ctx(t), k, "B", "D", ttl); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Handoff of a free key: error %v, want one matching dlm.ErrNotHeld (the token handing off holds nothing)", err)
	}
	if e := c.acquire(t, k, "E", ttl); e.Fence <= b.Fence {
		t.Errorf("after a hand-off with fence %d, an acquisition got fence %d; fences must increase strictly", b.Fence, e.Fence)
	}
	for _, tc := range []struct{ from, to string }{{"", "F"}, {"E", "E"}} {
		if _, err := h.Handoff(ctx(t), k, tc.from, tc.to, ttl); !errors.Is(err, dlm.ErrInvalid) {
			t.Errorf("Handoff(from %q, to %q): error %v, want one matching dlm.ErrInvalid", tc.from, tc.to, err)
		}
	}
	if _, err := c.Extend(ctx(t), k, "E", ttl); err != nil {
		t.Errorf("after invalid Handoff calls, Extend by the holder: %v", err)
	}
}

func testInvalidArguments(t *testing.T, c *strategyCase) {
	check := func(what string, f func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			err = f()
		}()
		if !errors.Is(err, dlm.ErrInvalid) {
			t.Errorf("%s: error %v, want one matching dlm.ErrInvalid", what, err)
		}
	}
	k := c.key("k")
	acq := func(key, token string, ttl time.Duration) func() error {
		return func() error { _, err := c.Acquire(ctx(t), key, token, ttl); return err }
	}
	check("Acquire with an empty key", acq("", "A", ttl))
	check("Acquire with an empty token", acq(k, "", ttl))
	check("Acquire with a zero TTL", acq(k, "A", 0))
	check("Acquire with a negative TTL", acq(k, "A", -time.Second))
	check("Extend with an empty key", func() error { _, err := c.Extend(ctx(t), "", "A", ttl); return err })
	check("Extend with a zero TTL", func() error { _, err := c.Extend(ctx(t), k, "A", 0); return err })
	check("Release with an empty token", func() error { return c.Release(ctx(t), k, "") })
}
