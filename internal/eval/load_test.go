package eval_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/runner"
)

// timedNode answers every call with {1} after perRun plus perCall for each
// call of the Run; with one slot it runs one Run at a time (a server behind
// one connection), without, any number at once. With stallEvery set, a Run
// that begins in the first stallFor of each stallEvery takes stallCost
// more (a machine that stalls now and then).
type timedNode struct {
	slot            chan struct{} // nil: no limit
	perRun, perCall time.Duration
	reply           []int64

	stallEvery, stallFor, stallCost time.Duration
}

func (n *timedNode) Run(ctx context.Context, calls []driver.Call) {
	if n.slot != nil {
		n.slot <- struct{}{}
		defer func() { <-n.slot }()
	}
	d := n.perRun + time.Duration(len(calls))*n.perCall
	if n.stallEvery > 0 && time.Duration(time.Now().UnixNano())%n.stallEvery < n.stallFor {
		d += n.stallCost
	}
	if d > 0 {
		time.Sleep(d) // virtual time: the tests run in a synctest bubble
	}
	for i := range calls {
		calls[i].Reply = n.reply
	}
}

func (n *timedNode) RunWait(context.Context, []driver.Call, driver.Wait) (driver.Acks, error) {
	return driver.Acks{}, errors.ErrUnsupported
}

func (n *timedNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// A serial caller's call costs no allocation, with a context that can end
// and has a deadline (whose end a slot would once have been freed on,
// through an allocating context.AfterFunc).
func TestSerialCallAllocatesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	n := eval.Coalesce(&timedNode{reply: []int64{1}}, 0)
	calls := []driver.Call{{SHA1: "x", Keys: []string{"k"}}}
	allocs := testing.AllocsPerRun(200, func() { n.Run(ctx, calls) })
	assert.Zero(t, allocs, "allocations per call")
	require.Equal(t, []int64{1}, calls[0].Reply)
	runs, carried := n.Stats()
	assert.Equal(t, runs, carried, "every call went by itself")
}

// A call whose context leaves it too little time to wait for a slot and
// then for its batch goes out at once by itself, and so meets a deadline
// that waiting would have missed, as long as fewer than inFlight such
// calls are out beyond the slots; a call with time to spare still waits.
func TestPressedCallGoesAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const run = 40 * time.Millisecond
		n := eval.Coalesce(&timedNode{perRun: run, reply: []int64{1}}, 2)
		call := func(ctx context.Context) error {
			calls := []driver.Call{{SHA1: "x", Keys: []string{"k"}}}
			n.Run(ctx, calls)
			return calls[0].Err
		}
		for range 30 { // the node learns its typical run time: about 40ms
			require.NoError(t, call(context.Background()))
		}
		busy := func() {
			for range 2 { // both slots taken
				go func() { _ = call(context.Background()) }()
			}
			synctest.Wait()
		}

		busy()
		runs0, _ := n.Stats()
		// 45ms left, less than two runs: waiting for a slot would take up
		// to 40ms, or a quarter of 45ms before spilling, then 40ms more:
		// too late.
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Millisecond)
		start := time.Now()
		require.NoError(t, call(ctx))
		cancel()
		assert.Equal(t, run, time.Since(start), "went out at once")
		runs, _ := n.Stats()
		assert.Equal(t, int64(1), runs-runs0, "by itself")
		time.Sleep(time.Second) // the slots free

		// At most inFlight calls go alone beyond the slots: a third waits.
		busy()
		pressed := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Millisecond)
			defer cancel()
			return call(ctx)
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- pressed() }()
		}
		synctest.Wait()
		assert.ErrorIs(t, pressed(), context.DeadlineExceeded, "a third pressed call waited")
		for range 2 {
			assert.NoError(t, <-errs)
		}
		time.Sleep(time.Second)

		busy()
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		start = time.Now()
		require.NoError(t, call(ctx))
		cancel()
		assert.Equal(t, 2*run, time.Since(start), "with a second to spare, waited for a slot")
		time.Sleep(2 * runner.Idle) // the batches' goroutines end
	})
}

// crowdedNode answers each Run after perRun while at most two are under
// way; a Run beyond them fails after timeout (a client that must dial a
// connection per Run in flight, on a loaded machine, under a per-node
// timeout).
type crowdedNode struct {
	perRun, timeout time.Duration
	runs            atomic.Int32
}

var errCrowded = errors.New("crowded: no reply within the timeout")

func (n *crowdedNode) Run(ctx context.Context, calls []driver.Call) {
	k := n.runs.Add(1)
	defer n.runs.Add(-1)
	if k > 2 {
		time.Sleep(n.timeout)
		for i := range calls {
			calls[i].Err = errCrowded
		}
		return
	}
	time.Sleep(n.perRun)
	for i := range calls {
		calls[i].Reply = []int64{1}
	}
}

func (n *crowdedNode) RunWait(context.Context, []driver.Call, driver.Wait) (driver.Acks, error) {
	return driver.Acks{}, errors.ErrUnsupported
}

func (n *crowdedNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// On a node where runs beyond two at once fail (a client that must dial
// a connection per run in flight, on a loaded machine, under a per-node
// timeout), 64 callers fail no call: their calls wait for one of the two
// slots and go out together. Sent each by itself, nearly every call fails.
func TestCrowdedNodeFailsNoCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := &crowdedNode{perRun: time.Millisecond, timeout: 100 * time.Millisecond}
		n := eval.Coalesce(node, 2)
		var failed, done atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				calls := make([]driver.Call, 1)
				for ctx.Err() == nil {
					calls[0] = driver.Call{SHA1: "x", Keys: []string{"k"}}
					n.Run(context.Background(), calls)
					if calls[0].Err != nil {
						failed.Add(1)
					} else {
						done.Add(1)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("in 10s: %d calls done, %d failed", done.Load(), failed.Load())
		assert.Positive(t, done.Load())
		assert.Zero(t, failed.Load(), "calls failed")
		time.Sleep(2 * runner.Idle) // the batches' goroutines end
	})
}
