package redigo

import (
	"context"

	"github.com/dlmgo/dlm"
)

var _ dlm.Pipeliner = (*Node)(nil)

// EvalSHAMany implements dlm.Pipeliner: it takes one connection from the
// pool, sends one EVALSHA per call, flushes, and reads the replies in order,
// each within ctx. When a reply cannot be read (ctx ended, I/O error) the
// batch fails and redigo closes the connection rather than returning it to
// the pool.
func (n *Node) EvalSHAMany(ctx context.Context, sha1 string, calls []dlm.ScriptCall) ([]dlm.ScriptResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(calls) == 0 {
		return []dlm.ScriptResult{}, nil
	}
	c, err := n.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for _, call := range calls {
		if err := c.Send("EVALSHA", scriptArgs(sha1, call.Keys, call.Args)...); err != nil {
			return nil, withCtxErr(ctx, err)
		}
	}
	if err := c.Flush(); err != nil {
		return nil, withCtxErr(ctx, err)
	}
	out := make([]dlm.ScriptResult, len(calls))
	for i := range out {
		reply, err := receive(ctx, c)
		if err != nil && !isReplyError(err) {
			return nil, withCtxErr(ctx, err)
		}
		out[i].Reply, out[i].Err = ints(reply, err)
	}
	return out, nil
}
