package strategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
)

// nodeErr wraps err, node i's failure in op, in a *dlm.NodeError, saying
// ErrNodeTimeout (not the caller's context.DeadlineExceeded) when the
// per-node timeout ended it, and records whether the node was slow.
func (s *Redlock) nodeErr(ctx context.Context, i int, op string, timeout time.Duration, err error) error {
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
	return &dlm.NodeError{Node: s.names[i], Op: op, Err: err}
}

// batchKeyTime is what ExtendMany adds to the per-node timeout for each key
// of a batch: a pipelined batch of 10,000 extensions takes a local server and
// a go-redis client about 0.4s on a loaded 2-core machine.
const batchKeyTime = 100 * time.Microsecond

// untilReplies returns a context that ends after timeout or once replied
// has been called n times, whichever comes first.
func untilReplies(ctx context.Context, timeout time.Duration, n int) (context.Context, func()) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	var left atomic.Int32
	left.Store(int32(n))
	return cctx, func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
}

// batchReply is one node's answer to a batch of extensions.
type batchReply struct {
	i   int
	res []dlm.Call
}

// batchKey is the state of one key of an ExtendMany batch.
type batchKey struct {
	i                           int // index into the caller's locks
	ttl                         time.Duration
	res                         []NodeResult
	fence                       int64
	extended, refused, answered int
}

// decided reports whether the key's outcome can no longer change.
func (k *batchKey) decided(n, q int) bool {
	return k.extended >= q || k.refused >= q || k.extended+n-k.answered < q
}

// ExtendMany implements dlm.Strategy. It sends all the extensions to every
// node in parallel, one pipelined batch per node, each node bounded by the per-node timeout plus 100µs
// per key of the batch (a server and the client need time for every key;
// 10,000 keys add 1s). Each key
// then follows Extend's rule: extended when a majority extended it and the
// validity, counted from before the batches were sent, is still positive;
// an error matching dlm.ErrNotHeld, with the lock released on the nodes that
// did extend it, when a majority says the token does not hold it; otherwise
// a *QuorumError and the previous lease stands. WithMaxExtensions and
// WithMaxHold count each key as Extend does.
func (s *Redlock) ExtendMany(ctx context.Context, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	out := make([]dlm.ExtendResult, len(locks))
	keys := make([]batchKey, 0, len(locks))
	for i, l := range locks {
		if err := s.cfg.checkCall(l.Key, l.Token, ttl, true); err != nil {
			out[i].Err = err
			continue
		}
		kttl := ttl
		if s.holds != nil {
			var err error
			if kttl, err = s.holds.extension(l.Key, l.Token, ttl, &s.cfg); err != nil {
				out[i].Err = err
				continue
			}
		}
		keys = append(keys, batchKey{i: i, ttl: kttl, res: s.results()})
	}
	if len(keys) == 0 {
		return out
	}
	if ctx.Err() != nil {
		for _, k := range keys {
			out[k.i].Err = newQuorumError("extend", locks[k.i].Key, s.quorum, k.res, nil, contextError(ctx.Err(), context.Cause(ctx)), "")
		}
		return out
	}
	calls := make([]dlm.Call, len(keys))
	for j, k := range keys {
		l := locks[k.i]
		calls[j] = dlm.Call{Keys: lockKeys(l.Key), Args: []string{l.Token, ms(k.ttl)}}
	}

	n, q := len(s.nodes), s.quorum
	// A server and the client take time per key: a large batch gets more
	// than one call's timeout. Validity still counts from before the batch.
	timeout := s.cfg.timeout + time.Duration(len(calls))*batchKeyTime
	start := time.Now()
	// The calls still running when the outcome is decided go on until they
	// end or time out, as Extend's do: a slower node keeps the lock too.
	cctx, replied := untilReplies(ctx, timeout, n)
	ch := make(chan batchReply, n)
	for i := range s.nodes {
		node, mine := s.nodes[i], slices.Clone(calls) // each node fills in its own replies
		workers.run(task{fn: func() {
			extendScript.RunMany(cctx, node, mine)
			ch <- batchReply{i: i, res: mine}
			replied()
		}})
	}

	apply := func(k *batchKey, i int, r []int64, err error) {
		k.answered++
		if err == nil && len(r) != 2 {
			err = errReply(r)
		}
		switch {
		case err != nil:
			if _, ok := err.(*dlm.NodeError); !ok {
				err = s.nodeErr(ctx, i, "extend", timeout, err)
			}
			k.res[i].Outcome, k.res[i].Err = Failed, err
		case r[0] == 1:
			k.res[i].Outcome = Granted
			k.fence = max(k.fence, r[1])
			k.extended++
		default:
			k.res[i].Outcome = Refused
			k.refused++
		}
	}
	lost := false // some key was refused by a majority: hear every node out
	done := func() bool {
		for j := range keys {
			if !keys[j].decided(n, q) {
				return false
			}
		}
		return !lost
	}
	answered := make([]bool, n)
	for left := n; left > 0 && !done(); {
		select {
		case rp := <-ch:
			left--
			answered[rp.i] = true
			for j := range keys {
				apply(&keys[j], rp.i, rp.res[j].Reply, rp.res[j].Err)
				lost = lost || keys[j].refused >= q
			}
			continue
		case <-cctx.Done():
		}
		// Replies that came with the deadline count; the rest failed.
		for more := true; more && left > 0; {
			select {
			case rp := <-ch:
				left--
				answered[rp.i] = true
				for j := range keys {
					apply(&keys[j], rp.i, rp.res[j].Reply, rp.res[j].Err)
				}
			default:
				more = false
			}
		}
		if ctx.Err() == nil {
			for i := range answered {
				if !answered[i] {
					err := &dlm.NodeError{Node: s.names[i], Op: "extend", Err: fmt.Errorf("%w %v", ErrNodeTimeout, timeout)}
					for j := range keys {
						apply(&keys[j], i, nil, err)
					}
				}
			}
		}
		break
	}

	now := time.Now()
	for j := range keys {
		k := &keys[j]
		l := locks[k.i]
		reason := ""
		if k.extended >= q {
			until := start.Add(k.ttl - s.cfg.driftMargin(k.ttl))
			if now.Before(until) {
				if s.holds != nil {
					s.holds.extended(l.Key, l.Token, until)
				}
				out[k.i].Lease = dlm.Lease{Fence: uint64(k.fence), Until: until}
				continue
			}
			reason = fmt.Sprintf("validity used up: the calls took %v of the %v TTL (drift margin %v)", now.Sub(start).Round(time.Microsecond), k.ttl, s.cfg.driftMargin(k.ttl))
		}
		var sentinel error
		if k.refused >= q {
			// The lock is lost: do not leave it on the nodes that did extend it.
			sentinel = dlm.ErrNotHeld
			s.undo(ctx, l.Key, lockKeys(l.Key), l.Token, k.res, nil, 0)
		}
		out[k.i].Err = newQuorumError("extend", l.Key, q, k.res, sentinel, contextError(ctx.Err(), context.Cause(ctx)), reason)
	}
	return out
}

// WatchRelease implements dlm.Strategy. It subscribes to the key's
// release channel (the release script publishes on it) on every node, in
// parallel, and returns once every subscription was
// confirmed or failed, or the per-node timeout passed, with at least one
// active; subscriptions confirmed later are kept too. A release publishes on
// every node that held the lock, so messages from other nodes within the
// per-node timeout of one that notified are taken for the same release and
// do not notify again; a second message from one node always does. Every
// notification is a hint. When no node could subscribe the error joins the
// nodes' errors (matching errors.ErrUnsupported when the nodes cannot
// watch). stop ends every subscription, including those still being made.
func (s *Redlock) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	if err := s.cfg.checkCall(key, "-", 0, false); err != nil {
		return nil, err
	}
	channel := lockKeys(key)[0]
	// Watches still being made end when ctx ends or stop is called.
	wctx, cancel := context.WithCancel(ctx)
	w := &watches{cancel: cancel}
	co := &coalescer{window: s.cfg.timeout, notify: notify}
	results := make(chan error, len(s.nodes))
	for i, n := range s.nodes {
		go func() {
			stop, err := n.Watch(wctx, channel, func(string) { co.message(i) })
			if err != nil {
				err = &dlm.NodeError{Node: s.names[i], Op: "watch", Err: err}
			} else {
				w.add(stop)
			}
			results <- err
		}()
	}
	timer := time.NewTimer(s.cfg.timeout)
	defer timer.Stop()
	var errs []error
wait:
	for range s.nodes {
		select {
		case err := <-results:
			if err != nil {
				errs = append(errs, err)
			}
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	if w.active() == 0 {
		w.stop()
		if len(errs) == 0 {
			errs = append(errs, contextError(ctx.Err(), context.Cause(ctx)))
			if errs[0] == nil {
				errs[0] = fmt.Errorf("%w %v", ErrNodeTimeout, s.cfg.timeout)
			}
		}
		return nil, fmt.Errorf("dlm: redlock watch %q: no node subscribed: %w", key, errors.Join(errs...))
	}
	return w.stop, nil
}

// watches collects the stop functions of subscriptions, also those made
// after it was stopped (they are stopped at once).
type watches struct {
	cancel  context.CancelFunc
	mu      sync.Mutex
	stops   []func()
	stopped bool
}

func (w *watches) add(stop func()) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		stop()
		return
	}
	w.stops = append(w.stops, stop)
	w.mu.Unlock()
}

func (w *watches) active() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.stops)
}

// stop ends every subscription; calling it again does nothing.
func (w *watches) stop() {
	w.mu.Lock()
	stops := w.stops
	w.stops, w.stopped = nil, true
	w.mu.Unlock()
	w.cancel()
	for _, f := range stops {
		f()
	}
}

// coalescer turns the messages one release publishes on several nodes into
// one notification: a message notifies unless another node's message
// notified within the window and this node has not sent since.
type coalescer struct {
	window time.Duration
	notify func()

	mu   sync.Mutex
	last time.Time // when a message last notified
	seen uint64    // bit i: node i sent since then (nodes past 63 always notify)
}

func (c *coalescer) message(i int) {
	c.mu.Lock()
	now := time.Now()
	var bit uint64
	if i < 64 {
		bit = 1 << i
	}
	same := bit != 0 && c.seen&bit == 0 && now.Sub(c.last) < c.window
	if same {
		c.seen |= bit
	} else {
		c.last, c.seen = now, bit
	}
	c.mu.Unlock()
	if !same {
		c.notify()
	}
}
