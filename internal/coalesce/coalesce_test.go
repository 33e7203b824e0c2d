package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/coalesce"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
)

// incr counts its calls in KEYS[1] and replies with its argument and the
// count.
var incr = nodekit.NewScript("return {tonumber(ARGV[1]), redis.call('INCR', KEYS[1])}")

func newNode(t *testing.T, addr string, inFlight int) *coalesce.Node {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return coalesce.New(goredis.New(c), inFlight)
}

// warm loads incr into the server's script cache (so that each call below
// is one EVALSHA) and returns the node's Stats after that.
func warm(t *testing.T, n *coalesce.Node) (runs, carried int64) {
	_, err := incr.Run(context.Background(), n, []string{"warm"}, "0")
	require.NoError(t, err)
	r, c, _ := n.Stats()
	return r, c
}

// A serial caller's calls go out by themselves, one Run each.
func TestSerialGoesAlone(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, srv.Addr, 2)
	runs0, carried0 := warm(t, n)
	for i := range 20 {
		r, err := incr.Run(context.Background(), n, []string{"serial"}, strconv.Itoa(i))
		require.NoError(t, err)
		assert.Equal(t, []int64{int64(i), int64(i + 1)}, r)
	}
	runs, carried, _ := n.Stats()
	assert.Equal(t, int64(20), runs-runs0)
	assert.Equal(t, int64(20), carried-carried0)
}

// While the node's slots are busy (the server is stopped), calls wait; once
// it answers they go out together, in one Run, each with its own reply.
func TestWaitingCallsGoTogether(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, srv.Addr, 2)
	runs0, carried0 := warm(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Freeze(t)
	var wg sync.WaitGroup
	call := func(i int, out *[]int64, errp *error) {
		defer wg.Done()
		*out, *errp = incr.Run(ctx, n, []string{"together"}, strconv.Itoa(i))
	}
	const busy, waiting = 2, 10
	replies := make([][]int64, busy+waiting)
	errs := make([]error, busy+waiting)
	for i := range busy {
		wg.Add(1)
		go call(i, &replies[i], &errs[i])
	}
	require.Eventually(t, func() bool { r, _, _ := n.Stats(); return r-runs0 == busy }, 5*time.Second, time.Millisecond)
	for i := busy; i < busy+waiting; i++ {
		wg.Add(1)
		go call(i, &replies[i], &errs[i])
	}
	time.Sleep(100 * time.Millisecond) // all of them queued behind the stopped server
	srv.Thaw(t)
	wg.Wait()
	counts := map[int64]bool{}
	for i := range replies {
		require.NoError(t, errs[i], "call %d", i)
		require.Len(t, replies[i], 2)
		assert.Equal(t, int64(i), replies[i][0], "each caller gets its own reply")
		counts[replies[i][1]] = true
	}
	assert.Len(t, counts, busy+waiting, "every call ran once")
	runs, carried, _ := n.Stats()
	assert.Equal(t, int64(busy+1), runs-runs0, "the waiting calls went out in one Run")
	assert.Equal(t, int64(busy+waiting), carried-carried0)
}

// A caller whose context ends while its call waits returns then, with the
// context's error, and its call is never sent; a batch whose callers have
// all gone is abandoned.
func TestWaitingCallerKeepsItsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, srv.Addr, 1)
	runs0, _ := warm(t, n)
	srv.Freeze(t)
	busyCtx, busyCancel := context.WithCancel(context.Background())
	busyDone := make(chan error, 1)
	go func() {
		_, err := incr.Run(busyCtx, n, []string{"busy"}, "0")
		busyDone <- err
	}()
	require.Eventually(t, func() bool { r, _, _ := n.Stats(); return r-runs0 == 1 }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := incr.Run(ctx, n, []string{"waiting"}, "1")
	took := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, time.Second, "returned at its own deadline (took %v)", took)

	busyCancel()
	select {
	case err := <-busyDone:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the in-flight call did not end with its caller's context")
	}
	srv.Thaw(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	// The next call goes out: the slot was handed on.
	_, err = incr.Run(context.Background(), n, []string{"after"}, "2")
	require.NoError(t, err)
	_, err = c.Get(context.Background(), "waiting").Result()
	assert.True(t, errors.Is(err, redis.Nil), "the abandoned waiting call was never sent (got %v)", err)
}

// deafNode keeps a call on key "deaf" for two seconds, whatever its
// context says.
type deafNode struct{ dlm.Node }

func (n deafNode) Run(ctx context.Context, calls []dlm.Call) {
	if calls[0].Keys[0] == "deaf" {
		time.Sleep(2 * time.Second)
		ctx = context.Background()
	}
	n.Node.Run(ctx, calls)
}

// A call that a driver keeps past its context's end gives up its slot
// then: the calls behind it go out.
func TestDeafCallFreesItsSlot(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	n := coalesce.New(deafNode{goredis.New(c)}, 1)
	runs0, _ := warm(t, n)
	dctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	go func() { _, _ = incr.Run(dctx, n, []string{"deaf"}, "0") }()
	require.Eventually(t, func() bool { r, _, _ := n.Stats(); return r-runs0 == 1 }, time.Second, time.Millisecond)
	start := time.Now()
	_, err := incr.Run(context.Background(), n, []string{"heard"}, "1")
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second, "waited for the deaf call")
}

// behindStopped runs f(0), …, f(k-1) at once while the server is stopped
// and n's only slot is busy, so that they queue; then it lets the server go
// on and waits for them. n must allow one run in flight.
func behindStopped(t *testing.T, srv *redistest.Server, n *coalesce.Node, k int, f func(i int)) {
	t.Helper()
	runs0, _ := warm(t, n)
	srv.Freeze(t)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = incr.Run(context.Background(), n, []string{"busy"}, "0") })
	require.Eventually(t, func() bool { r, _, _ := n.Stats(); return r-runs0 == 1 }, 5*time.Second, time.Millisecond)
	for i := range k {
		wg.Go(func() { f(i) })
	}
	time.Sleep(100 * time.Millisecond)
	srv.Thaw(t)
	wg.Wait()
}

// Calls of the scripts a Node merges, queued together, run as one script
// invocation, each with its own reply; a call that raises an error inside
// it (WRONGTYPE) gets the server's error by itself, and the others are
// unaffected; after SCRIPT FLUSH the batch script is sent again by EVAL.
func TestMergedCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer c.Close()
	ctx := context.Background()
	require.NoError(t, c.RPush(ctx, "wrong", "a list").Err())
	n := coalesce.New(goredis.New(c), 1, incr)
	for round := range 2 {
		if round == 1 {
			require.NoError(t, c.ScriptFlush(ctx).Err())
		}
		_, _, merged0 := n.Stats()
		const k = 20
		replies := make([][]int64, k)
		errs := make([]error, k)
		behindStopped(t, srv, n, k, func(i int) {
			key := fmt.Sprint("merged-", i)
			if i == 7 {
				key = "wrong"
			}
			replies[i], errs[i] = incr.Run(ctx, n, []string{key}, strconv.Itoa(i))
		})
		for i := range k {
			if i == 7 {
				assert.ErrorContains(t, errs[i], "WRONGTYPE", "round %d", round)
				continue
			}
			require.NoError(t, errs[i], "round %d, call %d", round, i)
			assert.Equal(t, []int64{int64(i), int64(round + 1)}, replies[i], "round %d, call %d: its own reply, run once", round, i)
		}
		_, _, merged := n.Stats()
		assert.Equal(t, int64(k-1), merged-merged0, "round %d: the calls ran inside one batch script", round)
	}
}

// A Node that does not say how it routes calls never has them merged: they
// may belong on different servers.
func TestUnknownRoutingNeverMerges(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	defer c.Close()
	n := coalesce.New(struct{ dlm.Node }{goredis.New(c)}, 1, incr)
	behindStopped(t, srv, n, 10, func(i int) {
		_, err := incr.Run(context.Background(), n, []string{fmt.Sprint("k", i)}, "0")
		assert.NoError(t, err)
	})
	runs, carried, merged := n.Stats()
	assert.Zero(t, merged)
	assert.Less(t, runs, carried, "still coalesced into fewer runs")
}

// On a Redis Cluster, calls merge only with calls of their own hash slot.
func TestMergedCallsOnCluster(t *testing.T) {
	servers := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr}})
	defer c.Close()
	n := coalesce.New(goredis.New(c), 0, incr)
	var calls []dlm.Call
	for i := range 12 {
		key := fmt.Sprint("{tag", i%3, "}:", i) // three slots, four calls each
		calls = append(calls, dlm.Call{SHA1: incr.SHA1(), Keys: []string{key}, Args: []string{strconv.Itoa(i)}})
	}
	incr.RunMany(context.Background(), n, calls)
	for i, c := range calls {
		require.NoError(t, c.Err, "call %d", i)
		assert.Equal(t, []int64{int64(i), 1}, c.Reply, "call %d", i)
	}
	_, _, merged := n.Stats()
	assert.Equal(t, int64(12), merged, "each slot's four calls ran in one batch script")
}

// A coalescing Node keeps every rule a driver must keep.
func TestConformance(t *testing.T) {
	harness.Run(t, func(t *testing.T, addr string) dlm.Node {
		return newNode(t, addr, 0)
	})
}
