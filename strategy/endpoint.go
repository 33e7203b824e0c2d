package strategy

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/mgr"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// endpoint is the one Redis endpoint that Single and Failover lock on,
// with what both do there alike: read the scripts' replies, release, give
// a lock back, watch for releases.
type endpoint struct {
	node driver.Node // wrapped for coalescing unless WithCoalescing(false)
	name string      // the node's name (nodekit.Name)
	cfg  config
}

// newEndpoint returns the endpoint over node with cfg and opts applied;
// ctor, the constructor's name, begins its errors.
func newEndpoint(ctor string, node driver.Node, cfg config, opts []Option) (endpoint, error) {
	if isNil(node) {
		return endpoint{}, errs.Within("strategy."+ctor, fmt.Errorf("%w: nil Node", dlm.ErrInvalid))
	}
	e := endpoint{name: nodekit.Name(node, 0), cfg: cfg}
	if err := applyOptions(&e.cfg, opts); err != nil {
		return endpoint{}, errs.Within("strategy."+ctor, err)
	}
	e.node = e.cfg.coalesced(node)
	return e, nil
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

// release is Release. It does not wait for replicas: a release that a
// promoted replica misses only keeps the lock until its TTL.
func (e *endpoint) release(ctx context.Context, key, token string) error {
	if err := e.cfg.checkCall(key, token, 0, false); err != nil {
		return err
	}
	cctx, cancel := e.cfg.withTimeout(ctx)
	defer cancel()
	script, keys, args := releaseCall(key, token, e.node)
	r, err := script.Run(cctx, e.node, keys, args...)
	if err == nil && len(r) != 1 {
		err = errReply(r)
	}
	if err != nil {
		return &nodeError{Node: e.name, Op: "release", Err: err}
	}
	if r[0] != releaseDeleted {
		return errNotHeld(key, e.name)
	}
	return nil
}

// undo releases token's lock on key in the background, so that the call
// that gives the lock back returns within its own deadline. A release that
// fails (the server is frozen, unreachable, restarting) is tried again,
// with growing pauses, until the server answers or until expires, after
// which no grant of that attempt can be left on the server. A refusal (the
// token holds nothing) is checked once more a little later: a server that
// thaws may run the acquisition, sent on another connection, after the
// release. A later acquisition uses another token, so a late release
// cannot delete it.
func (e *endpoint) undo(ctx context.Context, key, token string, expires time.Time) {
	c, node := &e.cfg, e.node
	script, keys, args := releaseCall(key, token, node)
	go func() {
		refused := false
		for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
			rctx, cancel := c.cleanupContext(ctx)
			r, err := script.Run(rctx, node, keys, args...)
			cancel()
			switch {
			case err == nil && len(r) == 1 && r[0] == releaseDeleted, err == nil && refused:
				return // released, or not held twice over
			case err == nil:
				refused = true
			}
			if !time.Now().Add(pause).Before(expires) {
				return
			}
			time.Sleep(pause)
		}
	}()
}

// watchRelease calls notify whenever the release script publishes on key's
// channel (named like the lock's Redis key) on node. When the node cannot
// watch, the error matches errors.ErrUnsupported.
func (e *endpoint) watchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	if err := e.cfg.checkCall(key, "-", 0, false); err != nil {
		return nil, err
	}
	stop, err := e.node.Watch(ctx, lockName(key), func(string) { notify() })
	if err != nil {
		return nil, &nodeError{Node: e.name, Op: "watch", Err: err}
	}
	return stop, nil
}

var (
	_ mgr.OneDeployment = (*single)(nil)
	_ mgr.OneDeployment = (*failover)(nil)
)
