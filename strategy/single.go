package strategy

import (
	"context"
	"time"

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

// The single-instance algorithm follows. It is on endpoint, not Single,
// because a Failover that waits for nothing after a write runs it too.

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
