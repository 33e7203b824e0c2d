package strategy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
)

// The lifecycle abilities of the strategies that run on one node (Single,
// and Failover on its primary).

// extendBatch extends locks held on node in one batch: pipelined when the
// node is a dlm.Pipeliner (one round trip), else one call after another.
// A WithTimeout bound grows by batchKeyTime per key. Every lease counts from
// before the batch was sent.
func extendBatch(ctx context.Context, c *config, node dlm.Node, name string, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	out := make([]dlm.ExtendResult, len(locks))
	calls := make([]dlm.ScriptCall, 0, len(locks))
	idx := make([]int, 0, len(locks))
	for i, l := range locks {
		if err := c.checkCall(l.Key, l.Token, ttl, true); err != nil {
			out[i].Err = err
			continue
		}
		keys, args := lockCall(l.Key, l.Token, ttl)
		calls = append(calls, dlm.ScriptCall{Keys: keys, Args: args})
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
	res, err := extendScript.RunMany(cctx, node, calls)
	until := start.Add(ttl - c.driftMargin(ttl))
	for j, i := range idx {
		var r []int64
		e := err
		if e == nil {
			r, e = res[j].Reply, res[j].Err
		}
		if e == nil && len(r) != 2 {
			e = errReply(r)
		}
		switch {
		case e != nil:
			out[i].Err = &dlm.NodeError{Node: name, Op: "extend", Err: e}
		case r[0] != 1:
			out[i].Err = fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, locks[i].Key, name)
		default:
			out[i].Lease = dlm.Lease{Fence: uint64(r[1]), Until: until}
		}
	}
	return out
}

// watchRelease calls notify whenever the release script publishes on key's
// channel (named like the lock's Redis key) on node. When the node is not a
// dlm.Notifier the error matches errors.ErrUnsupported.
func watchRelease(ctx context.Context, c *config, node dlm.Node, name, key string, notify func()) (func(), error) {
	if err := c.checkCall(key, "-", 0, false); err != nil {
		return nil, err
	}
	n, ok := dlm.NodeAs[dlm.Notifier](node)
	if !ok {
		return nil, fmt.Errorf("dlm: %s cannot notify (its Node is not a dlm.Notifier): %w", name, errors.ErrUnsupported)
	}
	stop, err := n.Watch(ctx, lockKeys(key)[0], func(string) { notify() })
	if err != nil {
		return nil, &dlm.NodeError{Node: name, Op: "watch", Err: err}
	}
	return stop, nil
}
