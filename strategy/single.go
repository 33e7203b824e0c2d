package strategy

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver"
)

// single is the strategy NewSingle returns.
type single struct{ endpoint }

var _ driver.Handoff = (*single)(nil)

// NewSingle returns the single-instance strategy over node, which also
// implements driver.Handoff. Options: WithDriftFactor, WithTimeout, WithMaxTTL,
// WithCoalescing.
//
// It locks on one Redis endpoint: SET NX PX with a fencing counter,
// compare-and-pexpire to extend, compare-and-delete to release.
//
// Its guarantees are those of the endpoint: a failover to a replica that had
// not yet received the lock, or a restart without persistence, lets a second
// owner in. See the failover strategy for a primary with replicas.
func NewSingle(node driver.Node, opts ...Option) (driver.Strategy, error) {
	e, err := newEndpoint("NewSingle", node, defaultConfig(), opts)
	if err != nil {
		return nil, err
	}
	return &single{e}, nil
}

// Acquire implements driver.Strategy.
func (s *single) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	return s.acquire(ctx, key, token, "", ttl)
}

// Handoff implements driver.Handoff: one run of the acquire script, which
// replaces from's lock by to's. When from does not hold key the error
// matches dlm.ErrNotHeld (and dlm.ErrNotAcquired) and nothing changed.
func (s *single) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	if err := checkHandoff(from, to); err != nil {
		return driver.Lease{}, err
	}
	return s.acquire(ctx, key, to, from, ttl)
}

// Extend implements driver.Strategy.
func (s *single) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	return s.extend(ctx, key, token, ttl)
}

// Release implements driver.Strategy.
func (s *single) Release(ctx context.Context, key, token string) error {
	return s.release(ctx, key, token)
}

// ExtendMany implements driver.Strategy: the extensions run pipelined, in one
// round trip for the batch. The whole batch is one call, bounded by WithTimeout plus
// 100µs per key; the Manager's auto-renewal sends batches of at most a
// thousand locks.
func (s *single) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	return s.extendBatch(ctx, locks, ttl)
}

// WatchRelease implements driver.Strategy. The release script publishes on a
// channel named like the lock's Redis key when an acquisition was refused
// on the lock; when the node cannot watch, the error matches
// errors.ErrUnsupported. Expiry publishes nothing: a waiter learns the
// holder's remaining TTL from heldError and tries again when it runs out.
func (s *single) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	return s.watchRelease(ctx, key, notify)
}

// Node returns the node the strategy locks on (wrapped for coalescing
// unless WithCoalescing(false)): the one deployment that primitives needing
// one order of events, such as package fairlock's arrival queue, keep their
// state on.
func (s *single) Node() driver.Node { return s.node }

// The single-instance algorithm follows, with the readers of its scripts'
// replies. It is on endpoint, not Single, because a Failover runs it too:
// all of it when it waits for nothing after a write, and the readers
// always.

// acquire is Single's Acquire, or with from set its Handoff: one run of the
// acquire script.
func (e *endpoint) acquire(ctx context.Context, key, token, from string, ttl time.Duration) (driver.Lease, error) {
	if err := e.cfg.checkCall(key, token, ttl, true); err != nil {
		return driver.Lease{}, err
	}
	start := time.Now()
	keys, args := acquireCall(key, token, from, ttl, e.cfg.maxTTL)
	cctx, cancel := e.cfg.withTimeout(ctx)
	r, err := acquireScript.Run(cctx, e.node, keys, args...)
	cancel()
	fence, err := e.acquired(ctx, key, token, from, start.Add(ttl), r, err)
	if err != nil {
		return driver.Lease{}, err
	}
	return e.timelyLease(ctx, key, token, start, ttl, fence)
}

// extend is Single's Extend: one run of the extend script.
func (e *endpoint) extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	if err := e.cfg.checkCall(key, token, ttl, true); err != nil {
		return driver.Lease{}, err
	}
	start := time.Now()
	keys, args := heldCall(key, token, ttl)
	cctx, cancel := e.cfg.withTimeout(ctx)
	defer cancel()
	r, err := extendScript.Run(cctx, e.node, keys, args...)
	fence, err := e.extended(key, r, err)
	if err != nil {
		return driver.Lease{}, err
	}
	return e.lease(start, ttl, fence), nil
}

// acquired returns the fence of an acquisition of key by token (a hand-off
// from from, when not empty) whose script replied r, or failed with err.
// When the script may have run though its reply is lost or malformed, the
// lock is given back (undo) until expires.
func (e *endpoint) acquired(ctx context.Context, key, token, from string, expires time.Time, r []int64, err error) (int64, error) {
	code, v, ok := verdict(r)
	if err == nil && (!ok || len(r) > 2 || code < replyRefused || code > replyQuarantined) {
		err = errReply(r)
	}
	if err != nil {
		err := &nodeError{Node: e.name, Op: "acquire", Err: err}
		if !notRun(err) {
			e.undo(ctx, key, token, expires)
		}
		return 0, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
	}
	if code != replyGranted {
		return 0, refusal(key, from, e.name, code, v)
	}
	return v, nil
}

// timelyLease returns the lease of key's lock granted with fence to an
// acquisition of ttl sent at start; when the grant (or the replicas'
// acknowledgements) came after that lease's validity ended, nobody may
// trust the lock: it is given back and the error matches
// dlm.ErrNotAcquired.
func (e *endpoint) timelyLease(ctx context.Context, key, token string, start time.Time, ttl time.Duration, fence int64) (driver.Lease, error) {
	l := e.lease(start, ttl, fence)
	if took := time.Since(start); !l.Until.After(start.Add(took)) {
		e.undo(ctx, key, token, start.Add(ttl))
		return driver.Lease{}, fmt.Errorf("%w: %q: %s answered after %v, past the lease's validity of %v",
			dlm.ErrNotAcquired, key, e.name, took.Round(time.Millisecond), ttl-e.cfg.driftMargin(ttl))
	}
	return l, nil
}

// extended returns the fence of an extension of key whose script replied
// r, or failed with err, or why the lock was not extended.
func (e *endpoint) extended(key string, r []int64, err error) (int64, error) {
	code, fence, ok := verdict(r)
	if err == nil && (!ok || len(r) > 2) {
		err = errReply(r)
	}
	switch {
	case err != nil:
		return 0, &nodeError{Node: e.name, Op: "extend", Err: err}
	case code == replyGranted:
		return fence, nil
	case code == replyRevoked:
		return 0, errRevoked(key, e.name)
	}
	return 0, errNotHeld(key, e.name)
}

// lease is valid for ttl less the drift margin, counted from before the
// request was sent (so a Failover's wait for replicas is taken off).
func (e *endpoint) lease(start time.Time, ttl time.Duration, fence int64) driver.Lease {
	return driver.Lease{Fence: uint64(fence), Until: start.Add(ttl - e.cfg.driftMargin(ttl))}
}

// notRun reports whether the node refused a call before running it because
// its hash slot is moving (TRYAGAIN): there is nothing to undo.
func notRun(err *nodeError) bool {
	_, moving := err.RetryAfter()
	return moving
}

// refusal is the error of an acquisition the acquire script refused with
// code (replyRefused or replyQuarantined) and value v; from is the token of
// a hand-off, or empty.
func refusal(key, from, node string, code, v int64) error {
	if from != "" && code == replyRefused {
		return fmt.Errorf("%w: %w: hand-off of %q: the token handing it off does not hold it on %s", dlm.ErrNotAcquired, dlm.ErrNotHeld, key, node)
	}
	return &heldError{Key: key, Remaining: time.Duration(v) * time.Millisecond, Quarantined: code == replyQuarantined}
}

// extendBatch is Single's ExtendMany: the extensions of locks in one
// pipelined batch. A WithTimeout bound grows by batchKeyTime per key.
// Every lease counts from before the batch was sent.
func (e *endpoint) extendBatch(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(locks))
	calls := make([]driver.Call, 0, len(locks))
	idx := make([]int, 0, len(locks))
	for i, l := range locks {
		if err := e.cfg.checkCall(l.Key, l.Token, ttl, true); err != nil {
			out[i].Err = err
			continue
		}
		keys, args := heldCall(l.Key, l.Token, ttl)
		calls = append(calls, driver.Call{Keys: keys, Args: args})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return out
	}
	start := time.Now()
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if e.cfg.timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, e.cfg.timeout+time.Duration(len(calls))*batchKeyTime)
	}
	defer cancel()
	extendScript.RunMany(cctx, e.node, calls)
	for j, i := range idx {
		fence, err := e.extended(locks[i].Key, calls[j].Reply, calls[j].Err)
		if out[i].Err = err; err == nil {
			out[i].Lease = e.lease(start, ttl, fence)
		}
	}
	return out
}
