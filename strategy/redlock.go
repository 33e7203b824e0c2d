package strategy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// DefaultNodeTimeout is Redlock's default per-node timeout (see WithTimeout).
const DefaultNodeTimeout = 50 * time.Millisecond

var fenceScript = mustScript("redlock_fence.lua")

// Redlock locks over N independent Redis masters with the Redlock algorithm:
// a call goes to all nodes in parallel, each bounded by the per-node timeout,
// and succeeds only when a majority (⌊N/2⌋+1) of them agree.
//
// An acquisition is valid for TTL − elapsed − drift, where elapsed is the
// time the calls took (on the monotonic clock) and drift is TTL×factor + 2ms;
// it fails when that is not positive. A failed acquisition releases the lock
// on every node, including those whose reply was lost or came too late. An
// extension follows the same quorum and validity rule and may be bounded
// (WithMaxExtensions, WithMaxHold). A release goes to every node.
//
// Fencing: each node keeps a counter per key, advanced when it grants the
// lock. The fence is the largest counter among the granting majority, written
// back (counter = max(counter, fence)) until a majority holds at least it
// before the lease is handed out; the write-back round is skipped when a
// majority already does, which is the usual case. Any two majorities share a
// node, so an acquisition that begins after another completed sees a larger
// counter and gets a larger fence, even when the two used different
// majorities. This needs counters that never go back: run the nodes with
// persistence that survives a crash (appendonly yes, appendfsync always), or
// seed a node that lost its data with the counters of a majority before it
// rejoins. The mutual exclusion of Redlock itself rests on the same
// assumption plus bounded clock drift between the nodes (see the Redlock
// specification).
//
// Acquiring again with the token that holds the lock refreshes it on every
// node and returns the same fence.
type Redlock struct {
	nodes   []dlm.Node
	names   []string
	quorum  int
	cfg     config
	holds   *holds // nil without an extension bound
	flights flights
	slow    []atomic.Bool // node i's last call ran into the per-node timeout
}

var _ dlm.Strategy = (*Redlock)(nil)

// NewRedlock returns the Redlock strategy over nodes, which must be distinct
// independent masters (not replicas of each other): no nil node, no node
// given twice (the same value, or the same name as reported by
// nodekit.Name). Options: WithTimeout (the per-node timeout, default
// DefaultNodeTimeout), WithDriftFactor, WithMaxExtensions, WithMaxHold.
func NewRedlock(nodes []dlm.Node, opts ...Option) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: NewRedlock: no nodes", dlm.ErrInvalid)
	}
	s := &Redlock{
		nodes:  append([]dlm.Node(nil), nodes...),
		names:  make([]string, len(nodes)),
		quorum: len(nodes)/2 + 1,
		cfg:    defaultConfig(),
		slow:   make([]atomic.Bool, len(nodes)),
	}
	s.cfg.timeout = DefaultNodeTimeout
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if isNil(n) {
			return nil, fmt.Errorf("%w: NewRedlock: nodes[%d] is nil", dlm.ErrInvalid, i)
		}
		for j := range i {
			if sameNode(nodes[j], n) {
				return nil, fmt.Errorf("%w: NewRedlock: nodes[%d] and nodes[%d] are the same node", dlm.ErrInvalid, j, i)
			}
		}
		s.names[i] = nodekit.Name(n, i)
		if j, ok := seen[s.names[i]]; ok {
			return nil, fmt.Errorf("%w: NewRedlock: nodes[%d] and nodes[%d] are both %s", dlm.ErrInvalid, j, i, s.names[i])
		}
		seen[s.names[i]] = i
	}
	if err := applyOptions(&s.cfg, opts); err != nil {
		return nil, fmt.Errorf("NewRedlock: %w", err)
	}
	if s.cfg.timeout <= 0 {
		return nil, fmt.Errorf("%w: NewRedlock: the per-node timeout (WithTimeout) must be positive", dlm.ErrInvalid)
	}
	if s.cfg.maxExtensions > 0 || s.cfg.maxHold > 0 {
		s.holds = &holds{maxExt: s.cfg.maxExtensions, maxHold: s.cfg.maxHold, m: map[string]*hold{}}
	}
	return s, nil
}

// sameNode reports whether a and b are equal values; values that cannot be
// compared (== would panic) are not the same.
func sameNode(a, b dlm.Node) (same bool) {
	if ta := reflect.TypeOf(a); ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false // an interface field holds an uncomparable value
		}
	}()
	return a == b
}

// Quorum returns the number of nodes that must agree: ⌊N/2⌋+1.
func (s *Redlock) Quorum() int { return s.quorum }

// Nodes returns the names of the nodes, in order.
func (s *Redlock) Nodes() []string { return append([]string(nil), s.names...) }

// Timeout returns the per-node timeout.
func (s *Redlock) Timeout() time.Duration { return s.cfg.timeout }

// reply is one node's answer to one script.
type reply struct {
	i   int
	r   []int64
	err error // a *dlm.NodeError
}

type nodeCall func(ctx context.Context, n dlm.Node) ([]int64, error)

// A fan is one script sent to several nodes at once.
type fan struct {
	ch     chan reply      // every reply, with room for all of them
	ctx    context.Context // ends at the per-node timeout, or when all replied
	cancel context.CancelFunc

	s       *Redlock
	parent  context.Context // the caller's
	op      string
	want    int
	call    nodeCall
	running atomic.Int32 // calls not yet replied
}

// fanOut runs call on the nodes listed in idx (all nodes when idx is nil),
// in parallel, bounded by the per-node timeout. Every reply arrives on the
// fan's channel, so no goroutine outlives its call. A reply whose length is
// not want is an error.
func (s *Redlock) fanOut(ctx context.Context, op string, idx []int, want int, call nodeCall) *fan {
	n := len(idx)
	if idx == nil {
		n = len(s.nodes)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	f := &fan{ch: make(chan reply, n), ctx: cctx, cancel: cancel, s: s, parent: ctx, op: op, want: want, call: call}
	f.running.Store(int32(n))
	for k := range n {
		i := k
		if idx != nil {
			i = idx[k]
		}
		workers.run(task{f: f, i: i})
	}
	return f
}

// run makes the call to node i and sends its reply.
func (f *fan) run(i int) {
	s := f.s
	r, err := f.call(f.ctx, s.nodes[i])
	if err == nil && (len(r) != f.want || f.op == "acquire" && r[0] != 0 && r[0] != 1) {
		err = errReply(r)
	}
	f.ch <- reply{i: i, r: r, err: s.nodeErr(f.parent, i, f.op, s.cfg.timeout, err)}
	if f.running.Add(-1) == 0 {
		f.cancel()
	}
}

// collect passes the replies of the nodes listed in idx (all when nil) to
// handle until it reports the outcome decided, all replies arrived, or ctx
// ended. A node that has not replied by the per-node timeout (even a Node
// that ignores its deadline) is handed to handle as failed, and its reply,
// when it comes, is ignored. collect returns how many replies are still to
// come on the fan's channel.
func (s *Redlock) collect(ctx context.Context, op string, f *fan, idx []int, handle func(reply) bool) (left int) {
	n := len(idx)
	if idx == nil {
		n = len(s.nodes)
	}
	var seen uint64 // bit i: node i's outcome is known
	var seenMore map[int]bool
	mark := func(i int) bool { // reports whether i was already marked
		if i < 64 {
			was := seen&(1<<i) != 0
			seen |= 1 << i
			return was
		}
		if seenMore == nil {
			seenMore = map[int]bool{}
		}
		was := seenMore[i]
		seenMore[i] = true
		return was
	}
	take := func(rp reply) bool {
		left--
		return !mark(rp.i) && handle(rp)
	}
	for left = n; left > 0; {
		select {
		case rp := <-f.ch:
			if take(rp) {
				return left
			}
			continue
		case <-f.ctx.Done():
		}
		// Replies that came with the deadline count.
		for more := true; more && left > 0; {
			select {
			case rp := <-f.ch:
				if take(rp) {
					return left
				}
			default:
				more = false
			}
		}
		if left == 0 || ctx.Err() != nil {
			return left
		}
		for k := range n {
			i := k
			if idx != nil {
				i = idx[k]
			}
			if mark(i) {
				continue
			}
			err := &dlm.NodeError{Node: s.names[i], Op: op, Err: fmt.Errorf("%w %v", ErrNodeTimeout, s.cfg.timeout)}
			if handle(reply{i: i, err: err}) {
				return left
			}
		}
		return left
	}
	return left
}

// anySlow reports whether a node still pending in res timed out last time.
func (s *Redlock) anySlow(res []NodeResult) bool {
	for i, r := range res {
		if r.Outcome == Pending && s.slow[i].Load() {
			return true
		}
	}
	return false
}

// linger passes up to left more replies on f to handle, for at most grace,
// and returns how many are still to come.
func (s *Redlock) linger(f *fan, left int, grace time.Duration, handle func(reply) bool) int {
	t := getTimer(grace)
	defer putTimer(t)
	for left > 0 {
		select {
		case rp := <-f.ch:
			left--
			handle(rp)
		case <-t.C:
			return left
		case <-f.ctx.Done():
			return left
		}
	}
	return left
}

// timers are reused by linger (one per call would be two allocations).
var timers sync.Pool

// getTimer returns a running timer that fires after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d) // since Go 1.23 a stopped timer's channel holds no stale value
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// results returns one Pending result per node.
func (s *Redlock) results() []NodeResult {
	res := make([]NodeResult, len(s.nodes))
	for i := range res {
		res[i] = NodeResult{Node: s.names[i], Remaining: -1}
	}
	return res
}

// Acquire implements dlm.Strategy. The error of a failed acquisition matches
// dlm.ErrNotAcquired and is a *QuorumError.
func (s *Redlock) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	if err := s.cfg.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	res := s.results()
	if s.flights.waitReleases(ctx, key, token); ctx.Err() != nil {
		return dlm.Lease{}, newQuorumError("acquire", key, s.quorum, res, dlm.ErrNotAcquired, contextError(ctx.Err(), context.Cause(ctx)), "")
	}
	start := time.Now()
	keys := lockKeys(key)
	args := []string{token, ms(ttl)} // one slice for every node's call
	n, q := len(s.nodes), s.quorum
	counters := make([]int64, n)
	ch := s.fanOut(ctx, "acquire", nil, 2, func(c context.Context, nd dlm.Node) ([]int64, error) {
		return acquireScript.Run(c, nd, keys, args...)
	})
	granted, answered := 0, 0
	handle := func(rp reply) bool {
		if res[rp.i].Outcome != Pending {
			return false // given up on at the timeout; its late reply does not count
		}
		answered++
		switch {
		case rp.err != nil:
			res[rp.i].Outcome, res[rp.i].Err = Failed, rp.err
		case rp.r[0] == 1:
			res[rp.i].Outcome = Granted
			counters[rp.i] = rp.r[1]
			granted++
		default:
			res[rp.i].Outcome = Refused
			if rp.r[1] >= 0 {
				res[rp.i].Remaining = time.Duration(rp.r[1]) * time.Millisecond
			}
		}
		return granted >= q || granted+n-answered < q
	}
	left := s.collect(ctx, "acquire", ch, nil, handle)

	reason := ""
	if granted >= q {
		if left > 0 && !s.anySlow(res) {
			// The other nodes usually answer within moments: give them as
			// long again as the quorum took, so that their grants need no
			// tracking and count for the fence.
			left = s.linger(ch, left, time.Since(start), handle)
		}
		fence, err := s.writeBackFence(ctx, keys, res, counters)
		until := start.Add(ttl - s.cfg.driftMargin(ttl))
		switch now := time.Now(); {
		case err != "":
			reason = err
		case !now.Before(until):
			reason = fmt.Sprintf("validity used up: the calls took %v of the %v TTL (drift margin %v)", now.Sub(start).Round(time.Microsecond), ttl, s.cfg.driftMargin(ttl))
		default:
			if s.holds != nil {
				s.holds.acquired(key, token, start, until)
			}
			if left > 0 {
				// Late grants are ours; a Release that comes before them
				// has them released as they arrive.
				s.drain(key, token, keys, ch, left, false)
			}
			return dlm.Lease{Fence: uint64(fence), Until: until}, nil
		}
	}
	s.undo(ctx, key, keys, token, res, ch, left)
	return dlm.Lease{}, newQuorumError("acquire", key, q, res, dlm.ErrNotAcquired, contextError(ctx.Err(), context.Cause(ctx)), reason)
}

// writeBackFence returns the fence of an acquisition granted by the nodes
// marked Granted in res: the largest of their counters, written back to as
// many of them as needed for a majority to hold at least it. It returns a
// reason when the majority was not reached; the nodes that failed are then
// marked Failed in res.
func (s *Redlock) writeBackFence(ctx context.Context, keys []string, res []NodeResult, counters []int64) (int64, string) {
	var fence int64
	for i, r := range res {
		if r.Outcome == Granted {
			fence = max(fence, counters[i])
		}
	}
	at := 0
	var low []int
	for i, r := range res {
		if r.Outcome == Granted {
			if counters[i] >= fence {
				at++
			} else {
				low = append(low, i)
			}
		}
	}
	if at >= s.quorum {
		return fence, ""
	}
	arg := strconv.FormatInt(fence, 10)
	ch := s.fanOut(ctx, "fence", low, 1, func(c context.Context, nd dlm.Node) ([]int64, error) {
		return fenceScript.Run(c, nd, keys[1:], arg)
	})
	answered := 0
	s.collect(ctx, "fence", ch, low, func(rp reply) bool {
		answered++
		switch {
		case rp.err != nil:
			res[rp.i].Outcome, res[rp.i].Err = Failed, rp.err
		case rp.r[0] >= fence:
			at++
		default:
			res[rp.i].Outcome, res[rp.i].Err = Failed, &dlm.NodeError{Node: s.names[rp.i], Op: "fence", Err: errReply(rp.r)}
		}
		return at >= s.quorum || at+len(low)-answered < s.quorum
	})
	if at < s.quorum {
		return 0, fmt.Sprintf("fence %d written back to only %d of the %d nodes needed", fence, at, s.quorum)
	}
	return fence, ""
}

// undo releases a failed acquisition: before returning on every node that
// granted it or failed at once (its reply may have been lost), and in the
// background on the nodes that timed out and on those whose reply is still
// to come (left replies on late), as each arrives. An acquisition by the same
// token waits for the background releases.
func (s *Redlock) undo(ctx context.Context, key string, keys []string, token string, res []NodeResult, late *fan, left int) {
	cctx := context.WithoutCancel(ctx)
	args := []string{token}
	release := func(c context.Context, nd dlm.Node) ([]int64, error) {
		return releaseScript.Run(c, nd, keys[:1], args...)
	}
	if left > 0 {
		s.drain(key, token, keys, late, left, true)
	}
	var now, later []int
	for i, r := range res {
		switch {
		case r.Outcome == Failed && timedOut(r.Err):
			later = append(later, i)
		case r.Outcome == Granted || r.Outcome == Failed:
			now = append(now, i)
		}
	}
	if len(later) > 0 {
		f := s.flights.add(key, token, true)
		go func() {
			defer s.flights.done(f)
			s.collect(cctx, "release", s.fanOut(cctx, "release", later, 1, release), later, func(reply) bool { return false })
		}()
	}
	if len(now) > 0 {
		s.collect(cctx, "release", s.fanOut(cctx, "release", now, 1, release), now, func(reply) bool { return false })
	}
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

// Extend implements dlm.Strategy. It succeeds when a majority extends the
// lock within the validity rule; when a majority says the token does not
// hold it, the error matches dlm.ErrNotHeld and the nodes that did extend it
// are released. Another failure leaves the lease as it was.
func (s *Redlock) Extend(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	if err := s.cfg.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	if s.holds != nil {
		var err error
		if ttl, err = s.holds.extension(key, token, ttl, &s.cfg); err != nil {
			return dlm.Lease{}, err
		}
	}
	res := s.results()
	if ctx.Err() != nil {
		return dlm.Lease{}, newQuorumError("extend", key, s.quorum, res, nil, contextError(ctx.Err(), context.Cause(ctx)), "")
	}
	start := time.Now()
	keys := lockKeys(key)
	args := []string{token, ms(ttl)} // one slice for every node's call
	n, q := len(s.nodes), s.quorum
	var fence int64
	ch := s.fanOut(ctx, "extend", nil, 2, func(c context.Context, nd dlm.Node) ([]int64, error) {
		return extendScript.Run(c, nd, keys, args...)
	})
	extended, refused, answered := 0, 0, 0
	left := s.collect(ctx, "extend", ch, nil, func(rp reply) bool {
		if res[rp.i].Outcome != Pending {
			return false // given up on at the timeout; its late reply does not count
		}
		answered++
		switch {
		case rp.err != nil:
			res[rp.i].Outcome, res[rp.i].Err = Failed, rp.err
		case rp.r[0] == 1:
			res[rp.i].Outcome = Granted
			fence = max(fence, rp.r[1])
			extended++
		default:
			res[rp.i].Outcome = Refused
			refused++
		}
		return extended >= q || refused >= q || extended+n-answered < q
	})
	reason := ""
	if extended >= q {
		until := start.Add(ttl - s.cfg.driftMargin(ttl))
		now := time.Now()
		if now.Before(until) {
			if s.holds != nil {
				s.holds.extended(key, token, until)
			}
			return dlm.Lease{Fence: uint64(fence), Until: until}, nil
		}
		reason = fmt.Sprintf("validity used up: the calls took %v of the %v TTL (drift margin %v)", now.Sub(start).Round(time.Microsecond), ttl, s.cfg.driftMargin(ttl))
	}
	var sentinel error
	if refused >= q {
		// The lock is lost: do not leave it on the nodes that did extend it.
		sentinel = dlm.ErrNotHeld
		s.undo(ctx, key, keys, token, res, ch, left)
	}
	return dlm.Lease{}, newQuorumError("extend", key, q, res, sentinel, contextError(ctx.Err(), context.Cause(ctx)), reason)
}

// Release implements dlm.Strategy. It sends the release to every node and
// returns once the outcome is known: nil when a majority no longer has the
// lock under token (released, or not held there), an error matching
// dlm.ErrNotHeld when a majority says token did not hold it, and otherwise a
// *QuorumError naming the nodes that failed. Calls still running when it
// returns end within the per-node timeout.
func (s *Redlock) Release(ctx context.Context, key, token string) error {
	if err := s.cfg.checkCall(key, token, 0, false); err != nil {
		return err
	}
	if s.holds != nil {
		s.holds.released(key, token)
	}
	// Acquisition replies still to come get released as they arrive.
	s.flights.markReleasing(key, token)
	res := s.results()
	if ctx.Err() != nil {
		return newQuorumError("release", key, s.quorum, res, nil, contextError(ctx.Err(), context.Cause(ctx)), "")
	}
	keys := lockKeys(key)
	n, q := len(s.nodes), s.quorum
	start := time.Now()
	args := []string{token}
	ch := s.fanOut(ctx, "release", nil, 1, func(c context.Context, nd dlm.Node) ([]int64, error) {
		return releaseScript.Run(c, nd, keys[:1], args...)
	})
	released, notHeld, answered := 0, 0, 0
	handle := func(rp reply) bool {
		if res[rp.i].Outcome != Pending {
			return false // given up on at the timeout; its late reply does not count
		}
		answered++
		switch {
		case rp.err != nil:
			res[rp.i].Outcome, res[rp.i].Err = Failed, rp.err
		case rp.r[0] == 1:
			res[rp.i].Outcome = Granted
			released++
		default:
			res[rp.i].Outcome = Refused
			notHeld++
		}
		pending := n - answered
		return notHeld >= q || // not held: final
			released+notHeld >= q && notHeld+pending < q || // released: final
			released+notHeld+pending < q // too many failed: final
	}
	left := s.collect(ctx, "release", ch, nil, handle)
	if left > 0 && ctx.Err() == nil && !s.anySlow(res) {
		// As in Acquire: the others usually answer within moments.
		left = s.linger(ch, left, time.Since(start), handle)
	}
	if left > 0 {
		// The release goes on; a new acquisition by token waits for it.
		s.drain(key, token, nil, ch, left, true)
	}
	switch {
	case notHeld >= q:
		return newQuorumError("release", key, q, res, dlm.ErrNotHeld, nil, "")
	case released+notHeld >= q && notHeld+n-answered < q:
		return nil
	}
	return newQuorumError("release", key, q, res, nil, contextError(ctx.Err(), context.Cause(ctx)), "")
}

// drain receives the left replies still to come on late, in the
// background. When releasing is set (a failed acquisition, or a release),
// or once a Release of key by token begins, each late grant or lost reply
// of an acquisition (keys != nil) is released as it arrives. An acquisition
// of key by token waits until no such release is running.
func (s *Redlock) drain(key, token string, keys []string, late *fan, left int, releasing bool) {
	f := s.flights.add(key, token, releasing)
	go func() {
		defer s.flights.done(f)
		for range left {
			rp := <-late.ch
			if keys == nil || rp.err == nil && rp.r[0] != 1 || !s.flights.releasing(f) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
			_, _ = releaseScript.Run(ctx, s.nodes[rp.i], keys[:1], token)
			cancel()
		}
	}()
}

// flights tracks replies still to come after the call that asked for them
// returned, by key and token.
type flights struct {
	n  atomic.Int32 // len(m), read without the lock on the fast path
	mu sync.Mutex
	m  map[string][]*flight
}

type flight struct {
	k         string
	releasing bool // guarded by flights.mu
	done      chan struct{}
}

func (fs *flights) add(key, token string, releasing bool) *flight {
	f := &flight{k: holdKey(key, token), releasing: releasing, done: make(chan struct{})}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = map[string][]*flight{}
	}
	if len(fs.m[f.k]) == 0 {
		fs.n.Add(1)
	}
	fs.m[f.k] = append(fs.m[f.k], f)
	return f
}

func (fs *flights) done(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	close(f.done)
	l := fs.m[f.k]
	for i, g := range l {
		if g == f {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(fs.m, f.k)
		fs.n.Add(-1)
	} else {
		fs.m[f.k] = l
	}
}

func (fs *flights) releasing(f *flight) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return f.releasing
}

// markReleasing has every flight of key by token release its late grants.
func (fs *flights) markReleasing(key, token string) {
	if fs.n.Load() == 0 {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.m[holdKey(key, token)] {
		f.releasing = true
	}
}

// waitReleases returns when no flight of key by token is releasing, or ctx ended.
func (fs *flights) waitReleases(ctx context.Context, key, token string) {
	if fs.n.Load() == 0 {
		return
	}
	var wait []chan struct{}
	fs.mu.Lock()
	for _, f := range fs.m[holdKey(key, token)] {
		if f.releasing {
			wait = append(wait, f.done)
		}
	}
	fs.mu.Unlock()
	for _, c := range wait {
		select {
		case <-c:
		case <-ctx.Done():
			return
		}
	}
}

// holds tracks acquisitions to bound their extensions.
type holds struct {
	maxExt  int
	maxHold time.Duration

	mu      sync.Mutex
	m       map[string]*hold // by key and token
	sweepAt int              // sweep expired entries when the map grows to this
}

type hold struct {
	since, until time.Time
	extensions   int // extension attempts so far
}

func holdKey(key, token string) string { return key + "\x00" + token }

// acquired records an acquisition; a re-acquisition by the holder keeps its
// original start and count.
func (h *holds) acquired(key, token string, start, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(key, token)
	e := h.m[k]
	if e == nil || !start.Before(e.until) {
		e = &hold{since: start}
		h.m[k] = e
	}
	e.until = until
	if len(h.m) >= h.sweepAt {
		now := time.Now()
		for k, e := range h.m {
			if !now.Before(e.until) {
				delete(h.m, k)
			}
		}
		h.sweepAt = 2*len(h.m) + 64
	}
}

// extension counts an extension attempt and returns the TTL it may use.
func (h *holds) extension(key, token string, ttl time.Duration, c *config) (time.Duration, error) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey(key, token)
	e := h.m[k]
	if e == nil || !now.Before(e.until) {
		// Acquired through another Redlock value, or the lease ended:
		// count from now.
		e = &hold{since: now, until: now}
		h.m[k] = e
	}
	if h.maxExt > 0 && e.extensions >= h.maxExt {
		return 0, fmt.Errorf("%w: %w: redlock extend %q: %d extensions made (WithMaxExtensions)", dlm.ErrNotHeld, ErrExtendLimit, key, e.extensions)
	}
	if h.maxHold > 0 {
		left := e.since.Add(h.maxHold).Sub(now)
		ttl = min(ttl, left.Truncate(time.Millisecond))
		if ttl < time.Millisecond || ttl <= c.driftMargin(ttl) {
			return 0, fmt.Errorf("%w: %w: redlock extend %q: held for %v of at most %v (WithMaxHold)", dlm.ErrNotHeld, ErrExtendLimit, key, now.Sub(e.since).Round(time.Millisecond), h.maxHold)
		}
	}
	e.extensions++
	return ttl, nil
}

func (h *holds) extended(key, token string, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.m[holdKey(key, token)]; e != nil {
		e.until = until
	}
}

func (h *holds) released(key, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, holdKey(key, token))
}
