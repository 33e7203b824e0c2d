package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func TestRedlockBadInput(t *testing.T) {
	c := startCluster(t, 2)
	a, b := c.nodes[0], c.nodes[1]
	sameAddr := goredis.New(slowSocketClient(t, c.servers[0].Addr)) // another client, same server
	for _, tc := range []struct {
		name  string
		nodes []driver.Node
		opts  []strategy.Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"empty nodes", []driver.Node{}, nil, "no nodes"},
		{"nil node", []driver.Node{a, nil}, nil, "nodes[1] is nil"},
		{"typed nil node", []driver.Node{(*stallNode)(nil), a}, nil, "nodes[0] is nil"},
		{"same node twice", []driver.Node{a, b, a}, nil, "nodes[0] and nodes[2] are the same node"},
		{"same server twice", []driver.Node{a, sameAddr}, nil, "nodes[0] and nodes[1] are both " + c.servers[0].Addr},
		{"uncomparable node twice", []driver.Node{sliceNode{Node: a, tags: []string{"x"}}, sliceNode{Node: a, tags: []string{"x"}}}, nil, "nodes[0] and nodes[1] are both x"},
		{"zero per-node timeout", []driver.Node{a}, []strategy.Option{strategy.WithTimeout(0)}, "per-node timeout"},
		{"negative timeout", []driver.Node{a}, []strategy.Option{strategy.WithTimeout(-time.Second)}, "WithTimeout"},
		{"nil option", []driver.Node{a}, []strategy.Option{nil}, "nil Option"},
		{"drift factor", []driver.Node{a}, []strategy.Option{strategy.WithDriftFactor(0.5)}, "WithDriftFactor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := strategy.NewRedlock(tc.nodes, tc.opts...)
			assert.Nil(t, r)
			assert.ErrorIs(t, err, dlm.ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	// sliceNode values are not comparable: distinct names make them fine.
	_, err := strategy.NewRedlock([]driver.Node{sliceNode{Node: a, tags: []string{"x"}}, sliceNode{Node: a, tags: []string{"y"}}})
	assert.NoError(t, err)

	r := c.redlock(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		key, token string
		ttl        time.Duration
		want       string
	}{
		{"empty key", "", "t", time.Second, "empty key"},
		{"empty token", "k", "", time.Second, "empty token"},
		{"zero TTL", "k", "t", 0, "resolution"},
		{"TTL within drift margin", "k", "t", 2 * time.Millisecond, "drift margin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Acquire(ctx, tc.key, tc.token, tc.ttl)
			assert.ErrorIs(t, err, dlm.ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
			_, err = r.Extend(ctx, tc.key, tc.token, tc.ttl)
			assert.ErrorIs(t, err, dlm.ErrInvalid)
		})
	}
	assert.ErrorIs(t, r.Release(ctx, "", "t"), dlm.ErrInvalid)
	assert.ErrorIs(t, r.Release(ctx, "k", ""), dlm.ErrInvalid)
}

func TestRedlockLockExtendUnlock(t *testing.T) {
	c := startCluster(t, 5)
	assert.Equal(t, strategy.DefaultNodeTimeoutForTest, c.redlock(t).Timeout())
	// A first call dials, and falls back from EVALSHA to EVAL: on a loaded
	// machine under the race detector that can take longer than 50ms.
	r := c.redlock(t, strategy.WithTimeout(time.Second))
	assert.Equal(t, 3, r.Quorum())
	assert.Len(t, r.Nodes(), 5)
	ctx := context.Background()
	const key, ttl = "cycle", 2 * time.Second

	before := time.Now()
	l, err := r.Acquire(ctx, key, "A", ttl)
	require.NoError(t, err)
	assert.EqualValues(t, 1, l.Fence)
	assert.True(t, l.Until.After(time.Now()))
	assert.False(t, l.Until.After(before.Add(ttl)), "validity must not exceed the TTL")
	// A majority holds it; the rest may still be receiving their call.
	assert.True(t, eventually(time.Second, func() bool {
		for i := range c.servers {
			if c.holder(t, i, key) != "A" {
				return false
			}
		}
		return true
	}), "the lock is set on all five nodes")

	// Another token is refused, with every node's answer and the holder's TTL.
	_, err = r.Acquire(ctx, key, "B", ttl)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.NotErrorIs(t, err, dlm.ErrNotHeld)
	var qe *strategy.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "acquire", qe.Op)
	assert.Equal(t, 0, qe.Count(strategy.Granted))
	assert.GreaterOrEqual(t, qe.Count(strategy.Refused), 3)
	var held *strategy.HeldError
	require.ErrorAs(t, err, &held)
	wait, ok := dlm.RetryAfter(err)
	assert.True(t, ok)
	assert.Greater(t, wait, time.Second)
	assert.LessOrEqual(t, wait, ttl)
	for i := range c.servers {
		assert.Equal(t, "A", c.holder(t, i, key), "B's attempt must not disturb A's lock")
	}

	// Acquiring again with the same token refreshes it and keeps the fence.
	l2, err := r.Acquire(ctx, key, "A", ttl)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, l2.Fence)

	e, err := r.Extend(ctx, key, "A", 3*time.Second)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, e.Fence)
	assert.True(t, e.Until.After(l.Until))
	_, err = r.Extend(ctx, key, "B", ttl)
	assert.ErrorIs(t, err, dlm.ErrNotHeld)

	require.NoError(t, r.Release(ctx, key, "A"))
	assert.True(t, eventually(time.Second, func() bool { return c.holdsAll(t, key, "") }), "released on all five nodes")
	err = r.Release(ctx, key, "A")
	assert.ErrorIs(t, err, dlm.ErrNotHeld)
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "release", qe.Op)
	_, err = r.Extend(ctx, key, "A", ttl)
	assert.ErrorIs(t, err, dlm.ErrNotHeld)

	l3, err := r.Acquire(ctx, key, "B", ttl)
	require.NoError(t, err)
	assert.Greater(t, l3.Fence, l.Fence)
	require.NoError(t, r.Release(ctx, key, "B"))
}

// Two of five servers frozen: everything still works, and each call is
// bounded by the per-node timeout, not by the clients' 30s socket timeouts.
func TestRedlockTwoFrozen(t *testing.T) {
	c := startCluster(t, 5)
	const nodeTimeout = 200 * time.Millisecond
	r := c.redlock(t, strategy.WithTimeout(nodeTimeout))
	ctx := context.Background()
	// Open a connection to every server before freezing two of them.
	_, err := r.Acquire(ctx, "warm", "W", time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx, "warm", "W"))
	c.freeze(t, 1)
	c.freeze(t, 3)

	const bound = 2 * time.Second // generous for a loaded machine, and far below 30s
	timed := func(name string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		d := time.Since(start)
		require.NoError(t, err, name)
		assert.Less(t, d, bound, "%s took %v", name, d)
		t.Logf("%s with two nodes frozen: %v", name, d)
	}
	var lease driver.Lease
	timed("acquire", func() (err error) { lease, err = r.Acquire(ctx, "k", "A", 5*time.Second); return })
	assert.Positive(t, lease.Fence)
	_, err = r.Acquire(ctx, "k", "B", 5*time.Second)
	assert.ErrorIs(t, err, dlm.ErrNotAcquired, "the three live nodes keep it exclusive")
	timed("extend", func() (err error) { _, err = r.Extend(ctx, "k", "A", 5*time.Second); return })
	timed("release", func() error { return r.Release(ctx, "k", "A") })
	for _, i := range []int{0, 2, 4} {
		assert.Empty(t, c.holder(t, i, "k"), "server %d", i)
	}
	// A new token, as after any failed Acquire: B's clean-up on the frozen
	// nodes goes on until its lease could have expired.
	timed("acquire after release", func() (err error) { _, err = r.Acquire(ctx, "k", "C", 5*time.Second); return })
}

// Three of five frozen: the acquisition fails, names the silent nodes, and
// leaves nothing behind on the two that granted it.
func TestRedlockThreeFrozen(t *testing.T) {
	c := startCluster(t, 5)
	var inflight atomic.Int32
	nodes := make([]driver.Node, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = countingNode{Node: n, inflight: &inflight}
	}
	const nodeTimeout = 200 * time.Millisecond
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(nodeTimeout))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = r.Acquire(ctx, "warm", "W", time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Release(ctx, "warm", "W"))

	held, err := r.Acquire(ctx, "held", "A", 10*time.Second)
	require.NoError(t, err)
	// Every node has answered that acquisition (it returns at the quorum):
	// a call still running when its node freezes would time out during the
	// next one and mark the node slow, and Acquire then gives up on it
	// before its own call does (reported pending, not failed).
	for i := range c.servers {
		require.Eventually(t, func() bool { return c.holder(t, i, "held") == "A" }, 5*time.Second, time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // and its reply was read
	frozen := []int{0, 2, 3}
	for _, i := range frozen {
		c.freeze(t, i)
	}

	start := time.Now()
	_, err = r.Acquire(ctx, "k", "A", 10*time.Second)
	d := time.Since(start)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.Less(t, d, 2*time.Second)
	var qe *strategy.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 2, qe.Count(strategy.Granted))
	assert.Equal(t, 3, qe.Count(strategy.Failed))
	for _, i := range frozen {
		assert.Contains(t, err.Error(), c.servers[i].Addr)
		assert.Equal(t, strategy.Failed, qe.Nodes[i].Outcome)
		var ne *strategy.NodeError
		require.ErrorAs(t, qe.Nodes[i].Err, &ne)
		assert.Equal(t, "acquire", ne.Op)
		assert.ErrorIs(t, ne, strategy.ErrNodeTimeout)
	}
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's context did not end") // only per-node deadlines
	t.Logf("three frozen: %v\n%v", d, err)
	// Nothing left behind on the healthy nodes, right away.
	for _, i := range []int{1, 4} {
		assert.Empty(t, c.holder(t, i, "k"), "server %d", i)
	}
	// No call the strategy started outlives the per-node timeout.
	assert.True(t, eventually(2*time.Second, func() bool { return inflight.Load() == 0 }), "calls in flight: %d", inflight.Load())

	// Extend and release of a lock held before the freeze fail too, naming the nodes.
	_, err = r.Extend(ctx, "held", "A", 10*time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, dlm.ErrNotHeld)
	assert.Contains(t, err.Error(), c.servers[2].Addr)
	err = r.Release(ctx, "held", "A")
	require.Error(t, err)
	assert.NotErrorIs(t, err, dlm.ErrNotHeld)
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 3, qe.Count(strategy.Failed))
	assert.Positive(t, held.Fence)
}

// A node whose replies are lost after its script ran still gets the
// release, and so does a grant that arrives after the acquisition failed.
func TestRedlockLostRepliesAreReleased(t *testing.T) {
	c := startCluster(t, 5)
	nodes := append([]driver.Node(nil), c.nodes...)
	for _, i := range []int{0, 1, 2} {
		nodes[i] = lossyNode{Node: c.nodes[i]}
	}
	ran := make(chan struct{}, 1)
	nodes[4] = signalNode{Node: deafNode{Node: c.nodes[4], delay: 300 * time.Millisecond}, key: lockKey("k"), ran: ran} // grants after the failure was decided
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
	require.NoError(t, err)
	_, err = r.Acquire(context.Background(), "k", "A", 10*time.Second)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.ErrorIs(t, err, errLost)
	var qe *strategy.QuorumError
	require.ErrorAs(t, err, &qe)
	// Nodes that answered before Acquire returned (lost replies included)
	// are released before it returns; a grant it did not wait for is
	// released as it arrives.
	for i, n := range qe.Nodes {
		if n.Outcome == strategy.Granted || n.Outcome == strategy.Failed {
			assert.Empty(t, c.holder(t, i, "k"), "server %d (%v)", i, n.Outcome)
		}
	}
	assert.Equal(t, strategy.Pending, qe.Nodes[4].Outcome)
	select {
	case <-ran: // server 4 granted
	case <-time.After(5 * time.Second):
		t.Fatal("server 4 never ran the acquisition")
	}
	for i := range c.servers {
		assert.True(t, eventually(5*time.Second, func() bool { return c.holder(t, i, "k") == "" }), "server %d", i)
	}
}

// Refusals decide an acquisition before slow nodes answer; the slow nodes'
// grants, which land later, are released as they arrive.
func TestRedlockLateGrantsAreReleased(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	const delay = 300 * time.Millisecond
	nodes := append([]driver.Node(nil), c.nodes[:3]...)
	for _, s := range c.servers[3:] {
		p := redistest.StartProxy(t, s.Addr)
		p.SetDelay(delay)
		nodes = append(nodes, goredis.New(slowSocketClient(t, p.Addr)))
	}
	for i := range 3 {
		require.NoError(t, c.clients[i].Set(ctx, "dlm:{k}", "7:other", 10*time.Second).Err())
	}
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(5*time.Second))
	require.NoError(t, err)
	_, err = r.Acquire(ctx, "k", "A", 10*time.Second)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	var qe *strategy.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 3, qe.Count(strategy.Refused))
	assert.Equal(t, 2, qe.Count(strategy.Pending), "decided without waiting for the slow nodes: %v", err)
	wait, ok := dlm.RetryAfter(err)
	assert.True(t, ok)
	assert.Greater(t, wait, 5*time.Second)
	assert.True(t, eventually(3*time.Second, func() bool {
		return c.holder(t, 3, "k") == "" && c.holder(t, 4, "k") == "" && c.counter(t, 3, "k") == 1 && c.counter(t, 4, "k") == 1
	}), "the late grants landed (counter 1) and were released")
	for i := range 3 {
		assert.Equal(t, "other", c.holder(t, i, "k"))
	}
}

// A slow node needed for the quorum shortens the validity; too slow, and the
// acquisition fails and is undone.
func TestRedlockSlowNodeShortensValidity(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	const delay = 60 * time.Millisecond
	p := redistest.StartProxy(t, c.servers[2].Addr)
	p.SetDelay(delay)
	nodes := append([]driver.Node(nil), c.nodes...)
	nodes[2] = goredis.New(slowSocketClient(t, p.Addr))
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(2*time.Second))
	require.NoError(t, err)
	c.servers[3].Kill(t)
	c.servers[4].Kill(t)

	const ttl = time.Second
	drift := time.Duration(float64(ttl)*strategy.DefaultDriftFactor) + 2*time.Millisecond
	l, err := r.Acquire(ctx, "k", "A", ttl)
	require.NoError(t, err)
	validity := time.Until(l.Until)
	t.Logf("validity with a %v node in the quorum: %v of %v", delay, validity, ttl)
	assert.LessOrEqual(t, validity, ttl-drift-delay)
	e, err := r.Extend(ctx, "k", "A", ttl)
	require.NoError(t, err)
	assert.LessOrEqual(t, time.Until(e.Until), ttl-drift-delay)
	require.NoError(t, r.Release(ctx, "k", "A"))

	// A TTL shorter than the slow node's delay leaves no validity.
	_, err = r.Acquire(ctx, "short", "A", delay/2)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	var qe *strategy.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Contains(t, qe.Reason, "validity used up")
	assert.Equal(t, 3, qe.Count(strategy.Granted))
	for i := range 3 {
		assert.Empty(t, c.holder(t, i, "short"), "server %d", i)
	}
}

// Fences strictly increase across acquisitions that each use a different
// majority, with servers killed and restarted (with their data, from an
// fsynced append-only file) in between. A round's acquisition may be
// refused at first by a late acquisition of the round before (its call to
// a server killed then, still being redialled as the server came back:
// a grant released as it lands, or settled by the round's release, but
// one that can refuse meanwhile); it is retried, with a new token, until
// granted, for at most 30s (a bound on a hang: a lock left behind expires
// after 5s). The guarantee is the fence of each grant, not how soon it
// came: a fixed pause before the restarts was too short on a loaded
// machine.
func TestRedlockFencesAcrossMajorities(t *testing.T) {
	// Clients that end abandoned calls at their deadline: go-redis would
	// otherwise keep redialling a killed server and run a stale acquisition
	// on it once it is back.
	c := startClusterWith(t, 5, ctxClient, "--appendonly", "yes", "--appendfsync", "always")
	const nodeTimeout = 200 * time.Millisecond
	r := c.redlock(t, strategy.WithTimeout(nodeTimeout))
	ctx := context.Background()
	var last uint64
	for round, down := range [][]int{{0, 1}, {2, 3}, {4, 0}, {1, 2}, {3, 4}} {
		for _, i := range down {
			c.servers[i].Kill(t)
		}
		var l driver.Lease
		var token string
		var err error
		for attempt, until := 0, time.Now().Add(30*time.Second); ; attempt++ {
			token = fmt.Sprint("T", round, ".", attempt)
			if l, err = r.Acquire(ctx, "k", token, 5*time.Second); err == nil || !errors.Is(err, dlm.ErrNotAcquired) || time.Now().After(until) {
				break
			}
			t.Logf("round %d, attempt %d: %v", round, attempt, err)
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			for i := range c.servers {
				if !contains(down, i) {
					t.Logf("server %d holder %q", i, c.holder(t, i, "k"))
				}
			}
		}
		require.NoError(t, err, "round %d, down %v", round, down)
		assert.Greater(t, l.Fence, last, "round %d, down %v", round, down)
		last = l.Fence
		// A majority holds a counter of at least the fence before it is used.
		at := 0
		for i := range c.servers {
			if !contains(down, i) && c.counter(t, i, "k") >= int64(l.Fence) {
				at++
			}
		}
		assert.GreaterOrEqual(t, at, 3, "round %d: servers with counter >= %d", round, l.Fence)
		// A release a majority missed (a per-node timeout on a loaded
		// machine) leaves the lock to its TTL: the next round retries
		// until then.
		if err := r.Release(ctx, "k", token); err != nil {
			t.Logf("round %d: %v", round, err)
		}
		for _, i := range down {
			c.servers[i].Restart(t)
		}
	}
	// The restarted servers kept their counters.
	for i := range c.servers {
		assert.Positive(t, c.counter(t, i, "k"), "server %d", i)
	}
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// An extension that a majority refuses is lost, and the minority that did
// extend it is released.
func TestRedlockExtendLostOnMajority(t *testing.T) {
	c := startCluster(t, 5)
	r := c.redlock(t, strategy.WithTimeout(time.Second))
	ctx := context.Background()
	c.acquireThenLose(t, r, "k", "A", 3)
	_, err := r.Extend(ctx, "k", "A", 5*time.Second)
	require.ErrorIs(t, err, dlm.ErrNotHeld)
	assert.True(t, eventually(time.Second, func() bool { return c.holdsAll(t, "k", "") }), "the nodes that extended it release it")
}

// Release succeeds when a majority no longer holds the token's lock, even if
// some of them had lost it already.
func TestRedlockReleaseMajority(t *testing.T) {
	c := startCluster(t, 5)
	r := c.redlock(t, strategy.WithTimeout(time.Second))
	ctx := context.Background()
	c.acquireThenLose(t, r, "k", "A", 2)
	require.NoError(t, r.Release(ctx, "k", "A"))
	for i := range c.servers {
		assert.Empty(t, c.holder(t, i, "k"), "server %d", i)
	}
}

func TestRedlockContextCause(t *testing.T) {
	c := startCluster(t, 5)
	r := c.redlock(t, strategy.WithTimeout(5*time.Second))
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	_, err := r.Acquire(ctx, "k", "A", time.Second)
	assert.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, cause)
	_, err = r.Extend(ctx, "k", "A", time.Second)
	assert.ErrorIs(t, err, cause)
	assert.ErrorIs(t, r.Release(ctx, "k", "A"), cause)

	// A deadline that ends while three nodes are silent.
	for _, i := range []int{0, 1, 2} {
		c.freeze(t, i)
	}
	dctx, dcancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, cause)
	defer dcancel()
	start := time.Now()
	_, err = r.Acquire(dctx, "k", "A", time.Second)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, cause)
	for _, i := range []int{3, 4} {
		assert.Empty(t, c.holder(t, i, "k"), "server %d", i)
	}
}

func TestRedlockManagerMutualExclusion(t *testing.T) {
	c := startCluster(t, 5)
	m, err := dlm.New(c.redlock(t, strategy.WithTimeout(time.Second)), dlm.WithTTL(5*time.Second), dlm.WithRetryDelay(time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const workers, rounds = 8, 10
	res := redistest.Contend(t, workers, rounds, 100*time.Microsecond, func() (uint64, func() error, error) {
		l, err := m.Lock(ctx, "counter")
		if err != nil {
			return 0, nil, err
		}
		return l.Fence(), func() error { return l.Unlock(context.Background()) }, nil
	})
	assert.Equal(t, int32(1), res.MaxHolders)
	assert.Equal(t, workers*rounds, res.Counter)
	for i := 1; i < len(res.Fences); i++ {
		assert.Greater(t, res.Fences[i], res.Fences[i-1], "fence %d", i)
	}
}

// A client built with go-redis' defaults works too.
func TestRedlockDefaultClients(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var nodes []driver.Node
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, goredis.New(c))
	}
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
	require.NoError(t, err)
	l, err := r.Acquire(context.Background(), "k", "A", time.Second)
	require.NoError(t, err)
	assert.EqualValues(t, 1, l.Fence)
	require.NoError(t, r.Release(context.Background(), "k", "A"))
}

// The per-node timeout holds even over a Node that ignores its deadline.
func TestRedlockNodeIgnoringDeadline(t *testing.T) {
	c := startCluster(t, 5)
	nodes := append([]driver.Node(nil), c.nodes...)
	for _, i := range []int{0, 1, 2} {
		nodes[i] = deafNode{Node: c.nodes[i], delay: 3 * time.Second}
	}
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	start := time.Now()
	_, err = r.Acquire(context.Background(), "k", "A", 10*time.Second)
	d := time.Since(start)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.ErrorIs(t, err, strategy.ErrNodeTimeout)
	assert.Less(t, d, 2*time.Second, "bounded by the per-node timeout, not by the deaf nodes")
	for _, i := range []int{3, 4} {
		assert.Empty(t, c.holder(t, i, "k"), "server %d", i)
	}
	// The deaf nodes' acquisitions land late and are released as they do.
	assert.True(t, eventually(10*time.Second, func() bool {
		for _, i := range []int{0, 1, 2} {
			if c.counter(t, i, "k") == 0 || c.holder(t, i, "k") != "" {
				return false
			}
		}
		return true
	}), "late grants released")
}

// A Redlock error is permanent only when the nodes that failed for good
// leave too few for a quorum: Lock keeps waiting with one node refusing
// authentication out of three, and stops at once with two.
func TestRedlockPermanentNeedsTooFewNodes(t *testing.T) {
	open := redistest.StartN(t, 2)
	secret := redistest.StartN(t, 2, "--requirepass", "pw")
	node := func(s *redistest.Server) driver.Node { return goredis.New(ctxClient(t, s.Addr)) }
	for _, tc := range []struct {
		name      string
		nodes     []driver.Node
		permanent bool
	}{
		{"one of three refuses", []driver.Node{node(open[0]), node(open[1]), node(secret[0])}, false},
		{"two of three refuse", []driver.Node{node(open[0]), node(secret[0]), node(secret[1])}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := strategy.NewRedlock(tc.nodes)
			require.NoError(t, err)
			m, err := dlm.New(r, dlm.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
			require.NoError(t, err)
			// Lock, not TryLock: a first call over new connections may
			// outlast Redlock's initial per-node timeout (50ms) on a
			// loaded machine.
			hctx, hcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer hcancel()
			holder, err := m.Lock(hctx, "perm")
			if !tc.permanent {
				require.NoError(t, err, "two good nodes grant it")
				defer holder.Unlock(context.Background())
			}
			wait := 400 * time.Millisecond
			if tc.permanent {
				wait = time.Minute // ended by the refusals, long before this
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			_, err = m.Lock(ctx, "perm")
			require.Error(t, err)
			assert.Equal(t, tc.permanent, dlm.Permanent(err), "%v", err)
			if tc.permanent {
				assert.NoError(t, ctx.Err(), "no waiting for a quorum that cannot form")
				assert.ErrorContains(t, err, "NOAUTH")
			} else {
				assert.ErrorIs(t, err, context.DeadlineExceeded, "waited for the holder")
			}
		})
	}
}
