package strategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"
)

// This file is Redlock's quorum engine: a round sends one batch of script
// calls to several nodes in parallel and tallies, for each call of the
// batch, what every node answered. The algorithm (redlock.go) decides what
// the tallies mean.

// A tally is what the nodes answered to one call of a round.
type tally struct {
	res   []nodeResult // one per node of the strategy; outcomePending until answered
	count [outcomeFailed + 1]int
	fence int64 // the largest value a judge recorded (the fence of a grant)
}

func (t *tally) set(i int, o outcome, err error) {
	t.res[i].Outcome, t.res[i].Err = o, err
	t.count[o]++
}

// n returns how many nodes answered with o (o is not outcomePending).
func (t *tally) n(o outcome) int { return t.count[o] }

// pending returns how many of the n nodes called have not answered.
func (t *tally) pending(n int) int {
	return n - t.count[outcomeGranted] - t.count[outcomeRefused] - t.count[outcomeFailed]
}

// decided reports whether it is known if q of the n nodes called grant: q
// did, or too few are left to.
func (t *tally) decided(n, q int) bool {
	g := t.count[outcomeGranted]
	return g >= q || g+t.pending(n) < q
}

// A judge returns the outcome of node i's successful reply r to the call
// tallied in t; an outcomeFailed outcome comes with the reason.
type judge func(t *tally, i int, r []int64) (outcome, error)

// A round is one batch of script calls sent to several nodes at once.
type round struct {
	s       *redlock
	op      string
	script  *eval.Script
	calls   []driver.Call // the batch; each node gets its own copy
	copies  []driver.Call // the copies, node after node, in one allocation
	nodes   []int         // the nodes called
	timeout time.Duration
	judge   judge
	t       []tally // one per call

	parent  context.Context // the caller's
	ctx     context.Context // ends at the timeout, or once every node replied
	cancel  context.CancelFunc
	ch      chan reply   // every reply, with room for all of them
	running atomic.Int32 // calls not yet replied
	sent    time.Time    // when the calls went to the nodes (or their queues)
	left    int          // replies not yet received by the collector

	// The storage of t, its results and copies for a round of one call to
	// at most inlineNodes nodes (nearly every round): one allocation, not
	// four.
	t1      [1]tally
	res1    [inlineNodes]nodeResult
	copies1 [inlineNodes]driver.Call
}

// inlineNodes is how many nodes a round's inline storage holds.
const inlineNodes = 7

// reply is node i's answer to a round's batch.
type reply struct {
	i     int
	calls []driver.Call
}

// round sends calls to the listed nodes in parallel, each bounded by
// timeout. Every reply arrives on the round's channel, so no goroutine
// outlives its call; the calls still running once the caller has its
// outcome go on until they end or time out.
func (s *redlock) round(ctx context.Context, op string, script *eval.Script, calls []driver.Call, nodes []int, timeout time.Duration, j judge) *round {
	r := &round{s: s, op: op, script: script, calls: calls, nodes: nodes, timeout: timeout, judge: j,
		parent: ctx, ch: make(chan reply, len(nodes)), left: len(nodes)}
	if len(calls) == 1 && len(s.nodes) <= inlineNodes {
		r.t, r.copies = r.t1[:], r.copies1[:len(nodes)]
		r.t[0].res = s.resultsIn(r.res1[:len(s.nodes)])
	} else {
		r.t, r.copies = make([]tally, len(calls)), make([]driver.Call, len(nodes)*len(calls))
		for k := range r.t {
			r.t[k].res = s.results()
		}
	}
	r.ctx, r.cancel = context.WithTimeout(ctx, timeout)
	r.running.Store(int32(len(nodes)))
	r.sent = time.Now()
	for k, i := range nodes {
		if !r.enqueue(k, i) {
			s.workers.Go(job{r, k, i})
		}
	}
	return r
}

// callsOf returns the copy of the round's calls for its k-th node.
func (r *round) callsOf(k int) []driver.Call {
	n := len(r.calls)
	return r.copies[k*n : (k+1)*n : (k+1)*n]
}

// callsTo returns the copy of the round's calls for its k-th node, filled
// afresh.
func (r *round) callsTo(k int) []driver.Call {
	calls := r.callsOf(k)
	copy(calls, r.calls)
	return calls
}

// call makes the round's calls to node i, its k-th, and sends the reply.
func (r *round) call(k, i int) {
	calls := r.callsTo(k)
	start := time.Now()
	r.script.RunMany(r.ctx, r.s.nodes[i], calls)
	r.reply(i, calls, start)
}

// enqueue puts the round's calls to node i, its k-th, in the node's queue
// for its next batch, when it coalesces and has no slot free: the batch's
// goroutine then sends the reply (Notify), and no worker waits for it: the two
// hand-offs between goroutines that a worker adds cost a five-node pair
// 15–23% of its time in BenchmarkRedlockParallel. It reports false when
// the node would send the calls at once, which a worker then does (call).
func (r *round) enqueue(k, i int) bool {
	if r.s.queues == nil {
		return false
	}
	q := r.s.queues[i]
	calls := r.callsTo(k)
	for j := range calls {
		calls[j].SHA1 = r.script.SHA1()
	}
	return q.Enqueue(r.ctx, calls, r, k)
}

// Notify implements eval.Notifier: the calls to the round's k-th node
// that enqueue queued hold their replies.
func (r *round) Notify(k int) {
	i, calls := r.nodes[k], r.callsOf(k)
	for _, c := range calls {
		if errors.Is(c.Err, driver.ErrNoScript) {
			// The server lost its scripts (a restart, SCRIPT FLUSH): a
			// worker sends the calls again, with EVAL when needed.
			r.s.workers.Go(job{r, k, i})
			return
		}
	}
	r.reply(i, calls, r.sent)
}

// reply sends node i's reply to calls, made since start.
func (r *round) reply(i int, calls []driver.Call, start time.Time) {
	switch took := time.Since(start); {
	case calls[0].Err == nil:
		r.s.latency.observe(i, took, false)
	case isTimeout(calls[0].Err) && r.parent.Err() == nil:
		r.s.latency.observe(i, r.timeout, true)
	}
	for k := range calls {
		calls[k].Err = r.s.nodeErr(r.parent, i, r.op, r.timeout, calls[k].Err)
	}
	r.ch <- reply{i: i, calls: calls}
	if r.running.Add(-1) == 0 {
		r.cancel()
	}
}

// take tallies a reply, unless its node was already given up on.
func (r *round) take(rp reply) {
	r.left--
	if r.t[0].res[rp.i].Outcome != outcomePending {
		return // failed at the timeout: a late reply does not count
	}
	for k := range r.t {
		o, err := outcomeFailed, rp.calls[k].Err
		if err == nil {
			if o, err = r.judge(&r.t[k], rp.i, rp.calls[k].Reply); err != nil {
				err = &nodeError{Node: r.s.names[rp.i], Op: r.op, Err: err}
			}
		}
		r.t[k].set(rp.i, o, err)
	}
}

// receive tallies replies until done reports true, every reply arrived,
// stop fires, or the round's context ends; it reports whether the context
// ended. Replies that came with the context's end count.
func (r *round) receive(stop <-chan time.Time, done func() bool) (ended bool) {
	for r.left > 0 && !done() {
		select {
		case rp := <-r.ch:
			r.take(rp)
		case <-stop:
			return false
		case <-r.ctx.Done():
			for r.left > 0 && !done() {
				select {
				case rp := <-r.ch:
					r.take(rp)
				default:
					return true
				}
			}
			return true
		}
	}
	return false
}

// collect tallies replies until done reports true, every node replied, or
// ctx ended. A node that has not replied by the round's timeout (even over
// a Node that ignores its deadline) is failed with ErrNodeTimeout, unless
// ctx ended, and its reply, when it comes, is ignored.
func (r *round) collect(ctx context.Context, done func() bool) {
	if !r.receive(nil, done) || ctx.Err() != nil {
		return
	}
	for _, i := range r.nodes {
		if done() {
			return
		}
		if r.t[0].res[i].Outcome == outcomePending {
			err := &nodeError{Node: r.s.names[i], Op: r.op, Err: fmt.Errorf("%w %v", ErrNodeTimeout, r.timeout)}
			for k := range r.t {
				r.t[k].set(i, outcomeFailed, err)
			}
		}
	}
}

// linger tallies the replies that arrive within grace, on a timer the
// strategy keeps between rounds (from Go 1.23, a timer reset after Stop
// delivers no stale value).
func (r *round) linger(grace time.Duration) {
	t, _ := r.s.lingers.Get().(*time.Timer)
	if t == nil {
		t = time.NewTimer(grace)
	} else {
		t.Reset(grace)
	}
	r.receive(t.C, never)
	t.Stop()
	r.s.lingers.Put(t)
}

// never is a done function for rounds whose every reply is awaited.
func never() bool { return false }

// nodeErr wraps err, node i's failure in op, in a *nodeError, saying
// ErrNodeTimeout (not the caller's context.DeadlineExceeded) when the
// per-node timeout ended it, and records whether the node was slow.
func (s *redlock) nodeErr(ctx context.Context, i int, op string, timeout time.Duration, err error) error {
	slow := err != nil && isTimeout(err)
	if s.slow[i].Load() != slow {
		s.slow[i].Store(slow) // written only on a change: every call reads it
	}
	if err == nil {
		return nil
	}
	switch {
	case slow && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		// Not the caller's deadline: do not report it as one.
		err = fmt.Errorf("%w %v", ErrNodeTimeout, timeout)
	case slow && ctx.Err() == nil:
		err = fmt.Errorf("%w %v: %w", ErrNodeTimeout, timeout, err) // a socket deadline
	}
	return &nodeError{Node: s.names[i], Op: op, Err: err}
}

// anySlow reports whether a node still pending in res timed out last time.
// lost reports that an acquisition tallied in t cannot reach the quorum
// unless a node whose last call timed out answers in time: the round then
// gives up at once instead of waiting out the per-node timeout for nodes
// that are probably stopped, while its partial grants keep every other
// caller of the key refused (with exactly a quorum of live nodes, one such
// round after another costs the timeout each). Giving up is always safe: a
// late grant is released like any other.
//
// It never gives up while a majority of the nodes timed out last time:
// every round would then give up before any slow node could answer, and
// the slow marks are cleared only by answers in time, so no lock would be
// granted again. (A client too loaded to read its replies in time marks
// every node slow; the rounds it gave up on at once kept their calls
// running, which loaded it further: 0 grants in 20s.)
func (s *redlock) lost(t *tally) bool {
	live, slow := 0, 0
	for i, r := range t.res {
		if s.slow[i].Load() {
			slow++
		} else if r.Outcome == outcomePending {
			live++
		}
	}
	return slow <= len(s.nodes)-s.quorum && t.n(outcomeGranted)+live < s.quorum
}

func (s *redlock) anySlow(res []nodeResult) bool {
	for i, r := range res {
		if r.Outcome == outcomePending && s.slow[i].Load() {
			return true
		}
	}
	return false
}

// timedOut reports whether a node's error says it did not answer in time.
func timedOut(err error) bool {
	return errors.Is(err, ErrNodeTimeout) || errors.Is(err, context.Canceled) || isTimeout(err)
}

// isTimeout reports whether err says a deadline passed (a context's, or a
// socket's: net and os errors report Timeout).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// latency keeps each node's typical reply time, for the adaptive per-node
// timeout.
type latency struct {
	est []atomic.Int64 // per node, in nanoseconds; 0 until a first reply
}

// observe records that node i replied after d, or, with timedOut, that it
// had not replied within d: the estimate then grows by half.
func (l *latency) observe(i int, d time.Duration, timedOut bool) {
	for {
		old := l.est[i].Load()
		var next int64
		switch {
		case timedOut:
			next = min(max(old, int64(d))*3/2, int64(maxNodeTimeout))
		case old == 0:
			next = int64(d)
		default:
			next = old + (int64(d)-old)/4
		}
		if l.est[i].CompareAndSwap(old, next) {
			return
		}
	}
}

// nodeTimeout returns the per-node timeout of a call: the fixed one of
// WithTimeout, or twice the typical latency of the quorum-th fastest node,
// within [defaultNodeTimeout, maxNodeTimeout] and, when ttl > 0, at most
// ttl/4 (the lease's validity counts from before the call).
func (s *redlock) nodeTimeout(ttl time.Duration) time.Duration {
	if s.cfg.timeoutSet {
		return s.cfg.timeout
	}
	var buf [8]int64 // on the stack for up to 8 nodes: a call's allocation saved
	est := buf[:0]
	for i := range s.latency.est {
		est = append(est, s.latency.est[i].Load())
	}
	slices.Sort(est)
	d := min(max(2*time.Duration(est[s.quorum-1]), defaultNodeTimeout), maxNodeTimeout)
	if ttl > 0 {
		d = max(min(d, ttl/4), min(defaultNodeTimeout, ttl/4))
	}
	return d
}

// A job is a round's call to its k-th node, run by the Redlock's workers
// (package runner): a value, where a closure would be an allocation per
// node call. BenchmarkRedlockLockUnlock shows what kept goroutines save.
type job struct {
	r    *round
	k, i int // node i, the round's k-th
}

// runJob is the workers' function.
func runJob(j job) { j.r.call(j.k, j.i) }
