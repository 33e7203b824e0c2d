package strategy

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Single locks on one Redis endpoint: SET NX PX with a fencing counter,
// compare-and-pexpire to extend, compare-and-delete to release.
//
// Its guarantees are those of the endpoint: a failover to a replica that had
// not yet received the lock, or a restart without persistence, lets a second
// owner in. See the failover strategy for a primary with replicas.
type Single struct {
	node dlm.Node
	name string
	cfg  config
}

var _ dlm.Handoff = (*Single)(nil)

// NewSingle returns the single-instance strategy over node.
// Options: WithDriftFactor, WithTimeout, WithMaxTTL, WithCoalescing.
func NewSingle(node dlm.Node, opts ...Option) (*Single, error) {
	if isNil(node) {
		return nil, fmt.Errorf("%w: NewSingle: nil Node", dlm.ErrInvalid)
	}
	s := &Single{node: node, name: nodekit.Name(node, 0), cfg: defaultConfig()}
	if err := applyOptions(&s.cfg, opts); err != nil {
		return nil, fmt.Errorf("NewSingle: %w", err)
	}
	s.node = s.cfg.coalesced(node)
	return s, nil
}

// Acquire implements dlm.Strategy.
func (s *Single) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	return s.acquire(ctx, key, token, "", ttl)
}

// Handoff implements dlm.Handoff: one run of the acquire script, which
// replaces from's lock by to's. When from does not hold key the error
// matches dlm.ErrNotHeld (and dlm.ErrNotAcquired) and nothing changed.
func (s *Single) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (dlm.Lease, error) {
	if err := checkHandoff(from, to); err != nil {
		return dlm.Lease{}, err
	}
	return s.acquire(ctx, key, to, from, ttl)
}

// acquire is Acquire, or with from set Handoff.
func (s *Single) acquire(ctx context.Context, key, token, from string, ttl time.Duration) (dlm.Lease, error) {
	if err := s.cfg.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	start := time.Now()
	keys, args := acquireCall(key, token, from, ttl, s.cfg.maxTTL)
	cctx, cancel := s.cfg.withTimeout(ctx)
	r, err := acquireScript.Run(cctx, s.node, keys, args...)
	cancel()
	if err == nil && (len(r) != 2 || r[0] < 0 || r[0] > 2) {
		err = errReply(r)
	}
	if err != nil {
		err := &NodeError{Node: s.name, Op: "acquire", Err: err}
		if !notRun(err) {
			// The script may have run even though the reply was lost: undo it.
			undo(ctx, &s.cfg, s.node, key, token, start.Add(ttl))
		}
		return dlm.Lease{}, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
	}
	if r[0] != 1 {
		return dlm.Lease{}, refusal(key, from, s.name, r)
	}
	l := s.lease(start, ttl, r[1])
	if took := time.Since(start); !l.Until.After(start.Add(took)) {
		// Granted, but the reply came after the lease's validity ended: a
		// lock nobody may trust. Give it back.
		undo(ctx, &s.cfg, s.node, key, token, start.Add(ttl))
		return dlm.Lease{}, fmt.Errorf("%w: %q: %s answered after %v, past the lease's validity of %v",
			dlm.ErrNotAcquired, key, s.name, took.Round(time.Millisecond), ttl-s.cfg.driftMargin(ttl))
	}
	return l, nil
}

// Extend implements dlm.Strategy.
func (s *Single) Extend(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	if err := s.cfg.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	start := time.Now()
	cctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	keys, args := heldCall(key, token, ttl)
	r, err := extendScript.Run(cctx, s.node, keys, args...)
	if err == nil && len(r) != 2 {
		err = errReply(r)
	}
	if err != nil {
		return dlm.Lease{}, &NodeError{Node: s.name, Op: "extend", Err: err}
	}
	switch r[0] {
	case 1:
		return s.lease(start, ttl, r[1]), nil
	case 3:
		return dlm.Lease{}, errRevoked(key, s.name)
	}
	return dlm.Lease{}, fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, key, s.name)
}

// Release implements dlm.Strategy.
func (s *Single) Release(ctx context.Context, key, token string) error {
	if err := s.cfg.checkCall(key, token, 0, false); err != nil {
		return err
	}
	cctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	keys, args := releaseCall(key, token, s.node)
	r, err := releaseScript.Run(cctx, s.node, keys, args...)
	if err == nil && len(r) != 1 {
		err = errReply(r)
	}
	if err != nil {
		return &NodeError{Node: s.name, Op: "release", Err: err}
	}
	if r[0] != 1 {
		return fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, key, s.name)
	}
	return nil
}

// lease is valid for ttl less the drift margin, counted from before the
// request was sent.
func (s *Single) lease(start time.Time, ttl time.Duration, fence int64) dlm.Lease {
	return dlm.Lease{Fence: uint64(fence), Until: start.Add(ttl - s.cfg.driftMargin(ttl))}
}

// ExtendMany implements dlm.Strategy: the extensions run pipelined, in one
// round trip for the batch. The whole batch is one call, bounded by WithTimeout plus
// 100µs per key; the Manager's auto-renewal sends batches of at most a
// thousand locks.
func (s *Single) ExtendMany(ctx context.Context, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	return extendBatch(ctx, &s.cfg, s.node, s.name, locks, ttl)
}

// WatchRelease implements dlm.Strategy. The release script publishes on a
// channel named like the lock's Redis key; when the node cannot watch, the
// error matches errors.ErrUnsupported. Expiry publishes
// nothing: a waiter learns the holder's remaining TTL from HeldError and
// tries again when it runs out.
func (s *Single) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	return watchRelease(ctx, &s.cfg, s.node, s.name, key, notify)
}
