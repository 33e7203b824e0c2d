package coalesce_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/coalesce"
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

func (n *timedNode) Run(ctx context.Context, calls []dlm.Call) {
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

func (n *timedNode) RunWait(context.Context, []dlm.Call, dlm.Wait) (dlm.Acks, error) {
	return dlm.Acks{}, errors.ErrUnsupported
}

func (n *timedNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// oneConnection is a node that runs one Run at a time, whatever it
// carries (a server behind one connection): there, batches pay.
func oneConnection() *timedNode {
	return &timedNode{slot: make(chan struct{}, 1), perRun: time.Millisecond, perCall: 10 * time.Microsecond, reply: []int64{1}}
}

// A serial caller's call costs no allocation in any mode, with a context
// that can end and has a deadline (whose end a slot would once have been
// freed on, through an allocating context.AfterFunc).
func TestSerialCallAllocatesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, mode := range []coalesce.Mode{coalesce.Auto, coalesce.On, coalesce.Off} {
		n := coalesce.New(&timedNode{reply: []int64{1}}, 0)
		n.SetMode(mode)
		calls := []dlm.Call{{SHA1: "x", Keys: []string{"k"}}}
		allocs := testing.AllocsPerRun(200, func() { n.Run(ctx, calls) })
		assert.Zero(t, allocs, "mode %d: allocations per call", mode)
		require.Equal(t, []int64{1}, calls[0].Reply)
		runs, carried := n.Stats()
		assert.Equal(t, runs, carried, "mode %d: every call went by itself", mode)
	}
}

// drive runs 64 callers on n for d of virtual time and returns how many
// calls completed.
func drive(n *coalesce.Node, d time.Duration) int64 { return drivePaced(n, d, 0) }

// drivePaced is drive with callers that pause for pace after each call.
func drivePaced(n *coalesce.Node, d, pace time.Duration) int64 {
	var done atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			calls := make([]dlm.Call, 1)
			for ctx.Err() == nil {
				calls[0] = dlm.Call{SHA1: "x", Keys: []string{"k"}}
				n.Run(context.Background(), calls)
				if calls[0].Err == nil {
					done.Add(1)
				}
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		})
	}
	wg.Wait()
	return done.Load()
}

// Auto coalesces where that completes more calls per second and not where
// it completes fewer, and completes about as many as the better of On and
// Off, less the epochs it spends probing the worse. With modes 17 and 32
// times apart, as here, that is 7–8% in 5s: the first probe comes after a
// quarter of a second, and the next after the longest hold (at half the
// hold, as before probeBudget, Auto completed 0.87 times as many as the
// better).
func TestAutoPicksTheFasterMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		node   func() dlm.Node
		wantOn bool
	}{
		// One Run at a time, whatever it carries: batches pay.
		{"one connection", func() dlm.Node {
			return oneConnection()
		}, true},
		// Any number of Runs at once, each call costing its own time: a
		// batch only makes its calls wait for each other.
		{"cost per call", func() dlm.Node {
			return &timedNode{perCall: time.Millisecond, reply: []int64{1}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const d = 5 * time.Second
				count := map[coalesce.Mode]int64{}
				for _, mode := range []coalesce.Mode{coalesce.On, coalesce.Off, coalesce.Auto} {
					n := coalesce.New(tc.node(), 0)
					n.SetMode(mode)
					count[mode] = drive(n, d)
					if mode == coalesce.Auto {
						assert.Equal(t, tc.wantOn, n.Coalescing(), "Auto's choice")
					}
				}
				best := max(count[coalesce.On], count[coalesce.Off])
				t.Logf("calls completed in %v: on %d, off %d, auto %d", d, count[coalesce.On], count[coalesce.Off], count[coalesce.Auto])
				worst := min(count[coalesce.On], count[coalesce.Off])
				assert.Greater(t, float64(count[coalesce.Auto]), 0.9*float64(best), "Auto completed too few")
				assert.Greater(t, count[coalesce.Auto], 3*worst, "Auto completed about as few as the worse mode")
				time.Sleep(time.Minute) // idle batch runners end; a bubble ends once every goroutine has
			})
		})
	}
}

// A serial caller never makes an epoch contended, and its calls go by
// themselves, whatever Auto has chosen.
func TestAutoSerialGoesAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := coalesce.New(&timedNode{perRun: time.Millisecond, reply: []int64{1}}, 0)
		n.SetMode(coalesce.Auto)
		calls := make([]dlm.Call, 1)
		for range 2000 {
			calls[0] = dlm.Call{SHA1: "x", Keys: []string{"k"}}
			n.Run(context.Background(), calls)
		}
		runs, carried := n.Stats()
		assert.Equal(t, int64(2000), runs)
		assert.Equal(t, int64(2000), carried)
	})
}

// Load that comes in bursts, with the node idle in between (a bench's
// turns, a job that runs every few seconds): the idle time counts for
// neither mode, so Auto keeps coalescing where that pays and completes
// about as many calls as On. (Before idle time was left out, the epoch
// that spanned a pause counted as one of few calls per second for the mode
// it measured, and Auto completed 0.84 times as many.)
func TestAutoIdleCountsForNeither(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		count := map[coalesce.Mode]int64{}
		for _, mode := range []coalesce.Mode{coalesce.On, coalesce.Auto} {
			n := coalesce.New(oneConnection(), 0)
			n.SetMode(mode)
			for i := range 24 {
				count[mode] += drive(n, time.Duration(100+37*i)*time.Millisecond)
				time.Sleep(2 * time.Second)
			}
		}
		t.Logf("calls completed in 24 bursts: on %d, auto %d", count[coalesce.On], count[coalesce.Auto])
		assert.Greater(t, float64(count[coalesce.Auto]), 0.9*float64(count[coalesce.On]), "Auto completed too few")
		time.Sleep(time.Minute)
	})
}

// A machine that stalls now and then, for about an epoch, makes one epoch
// of a probe slow whichever mode it measures: that alone does not turn
// coalescing off where it pays. (When one half of a probe could decide,
// Auto completed 0.86 times as many calls as On here.)
func TestAutoOneSlowEpochChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		count := map[coalesce.Mode]int64{}
		for _, mode := range []coalesce.Mode{coalesce.On, coalesce.Auto} {
			node := oneConnection()
			node.stallEvery, node.stallFor, node.stallCost = 370*time.Millisecond, 60*time.Millisecond, 20*time.Millisecond
			n := coalesce.New(node, 0)
			n.SetMode(mode)
			count[mode] = drive(n, 20*time.Second)
		}
		t.Logf("calls completed in 20s: on %d, auto %d", count[coalesce.On], count[coalesce.Auto])
		assert.Greater(t, float64(count[coalesce.Auto]), 0.9*float64(count[coalesce.On]), "Auto completed too few")
		time.Sleep(time.Minute)
	})
}

// driveFanOut runs callers that each send one call to every node at once,
// and wait for all of them (as a Redlock's callers wait for a quorum),
// for d of virtual time, and returns how many of those rounds completed.
// Node i joins the rounds after i*join, so that the nodes' epochs, and so
// their probes, do not line up (in virtual time, they would all fall at
// the same instants).
func driveFanOut(nodes []*coalesce.Node, callers int, d, join time.Duration) int64 {
	var done atomic.Int64
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				var round sync.WaitGroup
				for i, n := range nodes {
					if time.Since(start) < time.Duration(i)*join {
						break
					}
					round.Go(func() {
						n.Run(context.Background(), []dlm.Call{{SHA1: "x", Keys: []string{"k"}}})
					})
				}
				round.Wait()
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return done.Load()
}

// Nodes that every call fans out to, where each call costs its own time
// and a batch only makes calls wait for each other: calls by themselves
// complete eight times as many rounds. A node that measures by itself
// finds a tie (the others' batches set the pace) and keeps coalescing,
// unless its probe happens to overlap the others' (by themselves, the
// nodes completed 0.12-0.64 times as many rounds as Off in five runs);
// nodes made Together probe as one, stop coalescing, and complete 0.9
// times as many as Off (the rest is the first epochs, and the probes).
func TestAutoTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 8 * time.Second
		count := map[string]int64{}
		for _, run := range []string{"on", "off", "auto by itself", "auto together"} {
			nodes := make([]*coalesce.Node, 5)
			for i := range nodes {
				nodes[i] = coalesce.New(&timedNode{perCall: 5 * time.Millisecond, reply: []int64{1}}, 0)
				switch run {
				case "on":
					nodes[i].SetMode(coalesce.On)
				case "off":
					nodes[i].SetMode(coalesce.Off)
				default:
					nodes[i].SetMode(coalesce.Auto)
				}
			}
			if run == "auto together" {
				coalesce.Together(nodes...)
			}
			count[run] = driveFanOut(nodes, 16, d, 300*time.Millisecond)
			if run == "auto together" {
				for i, n := range nodes {
					assert.False(t, n.Coalescing(), "node %d coalesces", i)
				}
			}
		}
		t.Logf("rounds completed in %v: %v", d, count)
		assert.Greater(t, float64(count["auto together"]), 0.85*float64(count["off"]), "nodes together completed too few")
		time.Sleep(time.Minute)
	})
}

// A follower takes its leader's Mode, and the leader's choice as it
// changes; its own SetMode is overridden by the leader's next.
func TestTogetherFollowsTheFirst(t *testing.T) {
	a, b := coalesce.New(oneConnection(), 0), coalesce.New(oneConnection(), 0)
	a.SetMode(coalesce.On)
	b.SetMode(coalesce.Off)
	coalesce.Together(a, b)
	assert.True(t, b.Coalescing(), "a follower kept its own mode when made Together")
	a.SetMode(coalesce.Off)
	assert.False(t, b.Coalescing(), "a follower kept coalescing when its leader's mode became Off")
}

// phasedNode is first until switchAt, then next.
type phasedNode struct {
	first, next dlm.Node
	switchAt    time.Time
}

func (p *phasedNode) Run(ctx context.Context, calls []dlm.Call) {
	if time.Now().Before(p.switchAt) {
		p.first.Run(ctx, calls)
		return
	}
	p.next.Run(ctx, calls)
}

func (p *phasedNode) RunWait(context.Context, []dlm.Call, dlm.Wait) (dlm.Acks, error) {
	return dlm.Acks{}, errors.ErrUnsupported
}

func (p *phasedNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// A node that stopped coalescing where that was slower goes back to it
// once the modes tie (here, callers that pause between calls set the
// pace): a batch costs the server less. One of a Redlock's five nodes
// that stopped in a burst of steal once stayed so, since one node's mode
// hardly changes the pace of a quorum.
func TestAutoTieCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const first = 2 * time.Second
		n := coalesce.New(&phasedNode{
			first:    &timedNode{perCall: time.Millisecond, reply: []int64{1}}, // by themselves: 32 times as many
			next:     &timedNode{perRun: 100 * time.Microsecond, reply: []int64{1}},
			switchAt: time.Now().Add(first),
		}, 0)
		n.SetMode(coalesce.Auto)
		drive(n, first)
		require.False(t, n.Coalescing(), "Auto coalesced where calls by themselves completed 32 times as many")
		runs0, carried0 := n.Stats()
		drivePaced(n, 20*time.Second, 20*time.Millisecond)
		assert.True(t, n.Coalescing(), "Auto did not coalesce once the modes tied")
		runs, carried := n.Stats()
		t.Logf("while tied: %d runs carried %d callers' runs", runs-runs0, carried-carried0)
		time.Sleep(time.Minute)
	})
}

// A call whose context leaves it too little time to wait for a slot and
// then for its batch goes out at once by itself, and so meets a deadline
// that waiting would have missed, as long as fewer than inFlight such
// calls are out beyond the slots; a call with time to spare still waits.
func TestPressedCallGoesAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const run = 40 * time.Millisecond
		n := coalesce.New(&timedNode{perRun: run, reply: []int64{1}}, 2)
		n.SetMode(coalesce.On)
		call := func(ctx context.Context) error {
			calls := []dlm.Call{{SHA1: "x", Keys: []string{"k"}}}
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

func (n *crowdedNode) Run(ctx context.Context, calls []dlm.Call) {
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

func (n *crowdedNode) RunWait(context.Context, []dlm.Call, dlm.Wait) (dlm.Acks, error) {
	return dlm.Acks{}, errors.ErrUnsupported
}

func (n *crowdedNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// A probe without coalescing ends at its first few failed calls, and Auto
// does not probe again for the longest hold: on a node where calls sent
// each by itself fail, Auto fails about one wave of callers, once.
func TestAutoProbeEndsWhereCallsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := &crowdedNode{perRun: time.Millisecond, timeout: 100 * time.Millisecond}
		n := coalesce.New(node, 0)
		n.SetMode(coalesce.Auto)
		var failed, done atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				calls := make([]dlm.Call, 1)
				for ctx.Err() == nil {
					calls[0] = dlm.Call{SHA1: "x", Keys: []string{"k"}}
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
		cancel()
		t.Logf("in 10s: %d calls done, %d failed", done.Load(), failed.Load())
		assert.True(t, n.Coalescing(), "Auto coalesces")
		assert.LessOrEqual(t, failed.Load(), int64(64), "more than one wave of callers failed")
		time.Sleep(time.Minute)
	})
}
