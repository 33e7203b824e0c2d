package strategy

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
)

// The lifecycle abilities of the strategies that run on one node (Single,
// and Failover on its primary).

// notRun reports whether the node refused a call before running it because
// its hash slot is moving (TRYAGAIN): there is nothing to undo.
func notRun(err *NodeError) bool {
	_, moving := err.RetryAfter()
	return moving
}

// refusal is the error of an acquisition the acquire script refused with
// reply r ({0, pttl} or {2, quarantined ms}); from is the token of a
// hand-off, or empty.
func refusal(key, from, node string, r []int64) error {
	if from != "" && r[0] == 0 {
		return fmt.Errorf("%w: %w: hand-off of %q: the token handing it off does not hold it on %s", dlm.ErrNotAcquired, dlm.ErrNotHeld, key, node)
	}
	return &HeldError{Key: key, Remaining: time.Duration(r[1]) * time.Millisecond, Quarantined: r[0] == 2}
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
func undo(ctx context.Context, c *config, node dlm.Node, key, token string, expires time.Time) {
	keys, args := releaseCall(key, token, node)
	go func() {
		refused := false
		for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
			rctx, cancel := c.cleanupContext(ctx)
			r, err := releaseScript.Run(rctx, node, keys, args...)
			cancel()
			switch {
			case err == nil && len(r) == 1 && r[0] == 1, err == nil && refused:
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

// extendBatch extends locks held on node in one pipelined batch.
// A WithTimeout bound grows by batchKeyTime per key. Every lease counts from
// before the batch was sent.
func extendBatch(ctx context.Context, c *config, node dlm.Node, name string, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	out := make([]dlm.ExtendResult, len(locks))
	calls := make([]dlm.Call, 0, len(locks))
	idx := make([]int, 0, len(locks))
	for i, l := range locks {
		if err := c.checkCall(l.Key, l.Token, ttl, true); err != nil {
			out[i].Err = err
			continue
		}
		keys, args := heldCall(l.Key, l.Token, ttl)
		calls = append(calls, dlm.Call{Keys: keys, Args: args})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return out
	}
	start := time.Now()
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if c.timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, c.timeout+time.Duration(len(calls))*batchKeyTime)
	}
	defer cancel()
	extendScript.RunMany(cctx, node, calls)
	until := start.Add(ttl - c.driftMargin(ttl))
	for j, i := range idx {
		r, e := calls[j].Reply, calls[j].Err
		if e == nil && len(r) != 2 {
			e = errReply(r)
		}
		switch {
		case e != nil:
			out[i].Err = &NodeError{Node: name, Op: "extend", Err: e}
		case r[0] == 3:
			out[i].Err = errRevoked(locks[i].Key, name)
		case r[0] != 1:
			out[i].Err = fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, locks[i].Key, name)
		default:
			out[i].Lease = dlm.Lease{Fence: uint64(r[1]), Until: until}
		}
	}
	return out
}

// watchRelease calls notify whenever the release script publishes on key's
// channel (named like the lock's Redis key) on node. When the node cannot
// watch, the error matches errors.ErrUnsupported.
func watchRelease(ctx context.Context, c *config, node dlm.Node, name, key string, notify func()) (func(), error) {
	if err := c.checkCall(key, "-", 0, false); err != nil {
		return nil, err
	}
	stop, err := node.Watch(ctx, lockName(key), func(string) { notify() })
	if err != nil {
		return nil, &NodeError{Node: name, Op: "watch", Err: err}
	}
	return stop, nil
}

// Node returns the node the strategy locks on (wrapped for coalescing
// unless WithCoalescing(false)): the one deployment that primitives needing
// one order of events, such as package fairlock's arrival queue, keep their
// state on.
func (s *Single) Node() dlm.Node { return s.node }

// Node returns the node the strategy locks on (wrapped for coalescing
// unless WithCoalescing(false)); see Single.Node.
func (f *Failover) Node() dlm.Node { return f.node }

// A OneDeployment is a strategy whose locks all live on one Redis
// deployment, reached through Node: Single and Failover. Primitives that
// need one order of events there (packages fairlock and election) require
// it.
type OneDeployment interface {
	dlm.Strategy
	Node() dlm.Node
}

var (
	_ OneDeployment = (*Single)(nil)
	_ OneDeployment = (*Failover)(nil)
)
