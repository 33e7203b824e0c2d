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

// endpoint is the one Redis endpoint that Single and Failover lock on.
// This file holds what both do there alike and apart from the
// single-instance algorithm (single.go, which a Failover also runs):
// release, give a lock back, watch for releases.
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
