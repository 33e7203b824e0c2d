package rueidis

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
)

var _ dlm.Pipeliner = (*Node)(nil)

// EvalSHAMany implements dlm.Pipeliner with one DoMulti: one round trip on
// a standalone or Sentinel client, one per primary on a Cluster client. A
// call whose keys span Cluster hash slots fails on its own with an error
// matching dlm.ErrInvalid and is not sent. When ctx ends, or no call got a
// reply because of a connection error, the batch fails as a whole.
func (n *Node) EvalSHAMany(ctx context.Context, sha1 string, calls []dlm.ScriptCall) ([]dlm.ScriptResult, error) {
	type result struct {
		r   []dlm.ScriptResult
		err error
	}
	run := func() result {
		out := make([]dlm.ScriptResult, len(calls))
		cmds := make([]rueidis.Completed, 0, len(calls))
		idx := make([]int, 0, len(calls))
		for i, c := range calls {
			cmd, err := build(func() rueidis.Completed {
				return n.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
			})
			if err != nil {
				out[i].Err = err
				continue
			}
			cmds = append(cmds, cmd)
			idx = append(idx, i)
		}
		if len(cmds) == 0 {
			return result{r: out}
		}
		resps := n.c.DoMulti(ctx, cmds...)
		if err := ctx.Err(); err != nil {
			return result{err: err}
		}
		if err := batchErr(resps); err != nil {
			return result{err: err}
		}
		for j, res := range resps {
			out[idx[j]].Reply, out[idx[j]].Err = ints(res)
		}
		return result{r: out}
	}
	var res result
	if n.watches(ctx) {
		res = watchCancel(ctx, run, func(err error) result { return result{err: err} })
	} else {
		res = run()
	}
	return res.r, res.err
}

// batchErr returns the error of a batch none of whose calls got a reply:
// the error of the connection or of the context (rueidis may report the
// context's deadline from the socket a moment before ctx.Err is set).
func batchErr(resps []rueidis.RedisResult) error {
	var first error
	for _, r := range resps {
		err := r.NonRedisError()
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}
