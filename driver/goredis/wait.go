package goredis

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
)

var _ dlm.ReplicaWaiter = (*Node)(nil)

// EvalSHAWait implements dlm.ReplicaWaiter: EVALSHA and then WAIT (or
// WAITAOF) in one go-redis pipeline, which writes both on one pooled
// connection and reads both replies from it. On a *redis.ClusterClient the
// pipeline goes to the master that owns keys[0]. Other client types (Ring)
// report an error.
//
// go-redis reads a pipeline's replies within the client's ReadTimeout
// (default 3s), so w.Timeout must stay below it.
func (n *Node) EvalSHAWait(ctx context.Context, w dlm.Wait, sha1 string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return n.callWait(ctx, w, true, sha1, keys, args)
}

// EvalWait implements dlm.ReplicaWaiter like EvalSHAWait, with EVAL.
func (n *Node) EvalWait(ctx context.Context, w dlm.Wait, src string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return n.callWait(ctx, w, false, src, keys, args)
}

type waitResult struct {
	r    []int64
	acks dlm.Acks
	err  error
}

func (n *Node) callWait(ctx context.Context, w dlm.Wait, bySHA bool, script string, keys, args []string) ([]int64, dlm.Acks, error) {
	wcmd, err := w.Command()
	if err != nil {
		return nil, dlm.Acks{}, err
	}
	if n.ctxOnWire || ctx.Done() == nil {
		res := n.doWait(ctx, w, wcmd, bySHA, script, keys, args)
		return res.r, res.acks, res.err
	}
	if err := ctx.Err(); err != nil {
		return nil, dlm.Acks{}, err
	}
	ch := make(chan waitResult, 1)
	go func() { ch <- n.doWait(ctx, w, wcmd, bySHA, script, keys, args) }()
	select {
	case res := <-ch:
		return res.r, res.acks, res.err
	case <-ctx.Done():
		return nil, dlm.Acks{}, ctx.Err()
	}
}

// pipeliner returns the client whose pipelines run on one connection to
// the server that holds keys.
func (n *Node) pipeliner(ctx context.Context, keys []string) (redis.Pipeliner, error) {
	switch c := n.c.(type) {
	case *redis.Client:
		return c.Pipeline(), nil
	case *redis.ClusterClient:
		if len(keys) == 0 {
			return nil, fmt.Errorf("goredis: a script without keys cannot be routed to one cluster master for WAIT")
		}
		m, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		return m.Pipeline(), nil
	}
	return nil, fmt.Errorf("goredis: %T cannot send a script and WAIT on one connection (use *redis.Client, a failover client or *redis.ClusterClient)", n.c)
}

func (n *Node) doWait(ctx context.Context, w dlm.Wait, wcmd []string, bySHA bool, script string, keys, args []string) waitResult {
	p, err := n.pipeliner(ctx, keys)
	if err != nil {
		return waitResult{err: err}
	}
	var ev *redis.Cmd
	if bySHA {
		ev = p.EvalSha(ctx, script, keys, toAny(args)...)
	} else {
		ev = p.Eval(ctx, script, keys, toAny(args)...)
	}
	wc := p.Do(ctx, toAny(wcmd)...)
	_, _ = p.Exec(ctx) // each command keeps its own reply or error
	r, err := ints(ev)
	if err != nil {
		return waitResult{err: err}
	}
	acks, err := parseAcks(w, wc)
	if err != nil {
		return waitResult{r: r, err: fmt.Errorf("dlm: %s after the script: %w", wcmd[0], err)}
	}
	return waitResult{r: r, acks: acks}
}

// parseAcks reads WAIT's integer or WAITAOF's pair of integers.
func parseAcks(w dlm.Wait, c *redis.Cmd) (dlm.Acks, error) {
	v, err := c.Result()
	if err != nil {
		return dlm.Acks{}, err
	}
	var reply []int64
	switch v := v.(type) {
	case int64:
		reply = []int64{v}
	case []any:
		for _, e := range v {
			x, ok := e.(int64)
			if !ok {
				return dlm.Acks{}, fmt.Errorf("reply element is %T, want an integer", e)
			}
			reply = append(reply, x)
		}
	default:
		return dlm.Acks{}, fmt.Errorf("reply is %T, want integers", v)
	}
	return w.ParseAcks(reply)
}
