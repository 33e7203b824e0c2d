package goredis

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
)

var _ dlm.Pipeliner = (*Node)(nil)

// EvalSHAMany implements dlm.Pipeliner with one go-redis pipeline (on a
// Cluster, one per node the keys live on).
func (n *Node) EvalSHAMany(ctx context.Context, sha1 string, calls []dlm.ScriptCall) ([]dlm.ScriptResult, error) {
	run := func() ([]dlm.ScriptResult, error) {
		cmds := make([]*redis.Cmd, len(calls))
		_, _ = n.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range calls {
				cmds[i] = p.EvalSha(ctx, sha1, c.Keys, toAny(c.Args)...)
			}
			return nil
		})
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out := make([]dlm.ScriptResult, len(calls))
		for i, cmd := range cmds {
			out[i].Reply, out[i].Err = ints(cmd)
		}
		return out, nil
	}
	if n.ctxOnWire || ctx.Done() == nil {
		return run()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		r   []dlm.ScriptResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := run()
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		return res.r, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
