package redigo

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
)

var _ dlm.ReplicaWaiter = (*Node)(nil)

// EvalSHAWait implements dlm.ReplicaWaiter: it takes one connection from the
// pool, sends EVALSHA and then WAIT (or WAITAOF), flushes both, and reads
// both replies, each within ctx (redis.ReceiveContext). A connection whose
// replies could not both be read (ctx ended, I/O error) is closed by redigo
// rather than returned to the pool.
//
// A read also ends at the connection's read timeout (redis.DialReadTimeout),
// so w.Timeout must stay below it.
func (n *Node) EvalSHAWait(ctx context.Context, w dlm.Wait, sha1 string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return n.doWait(ctx, w, "EVALSHA", sha1, keys, args)
}

// EvalWait implements dlm.ReplicaWaiter like EvalSHAWait, with EVAL.
func (n *Node) EvalWait(ctx context.Context, w dlm.Wait, src string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return n.doWait(ctx, w, "EVAL", src, keys, args)
}

func (n *Node) doWait(ctx context.Context, w dlm.Wait, cmd, script string, keys, args []string) ([]int64, dlm.Acks, error) {
	wcmd, err := w.Command()
	if err != nil {
		return nil, dlm.Acks{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, dlm.Acks{}, err
	}
	c, err := n.pool.GetContext(ctx)
	if err != nil {
		return nil, dlm.Acks{}, err
	}
	defer c.Close()
	wargs := make([]any, len(wcmd)-1)
	for i, a := range wcmd[1:] {
		wargs[i] = a
	}
	if err := c.Send(cmd, scriptArgs(script, keys, args)...); err != nil {
		return nil, dlm.Acks{}, err
	}
	if err := c.Send(wcmd[0], wargs...); err != nil {
		return nil, dlm.Acks{}, err
	}
	if err := c.Flush(); err != nil {
		return nil, dlm.Acks{}, withCtxErr(ctx, err)
	}
	reply, err := receive(ctx, c)
	if err != nil && !isReplyError(err) {
		// The connection broke or ctx ended: redigo marked it failed.
		return nil, dlm.Acks{}, withCtxErr(ctx, err)
	}
	r, serr := ints(reply, err)
	// Read WAIT's reply even after a script error, so that the connection
	// goes back to the pool with nothing left to read.
	wreply, werr := receive(ctx, c)
	if serr != nil {
		if werr != nil && !isReplyError(werr) {
			serr = fmt.Errorf("%w (and reading %s's reply: %w)", serr, wcmd[0], withCtxErr(ctx, werr))
		}
		return nil, dlm.Acks{}, serr
	}
	acks, err := parseAcks(w, wreply, werr)
	if err != nil {
		return r, dlm.Acks{}, fmt.Errorf("dlm: %s after the script: %w", wcmd[0], withCtxErr(ctx, err))
	}
	return r, acks, nil
}

// receive reads one reply, within ctx when ctx can end.
func receive(ctx context.Context, c redis.Conn) (any, error) {
	if ctx.Done() == nil {
		return c.Receive()
	}
	return redis.ReceiveContext(c, ctx)
}

// isReplyError reports whether err is an error reply from the server, after
// which the connection is still in step.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// scriptArgs returns EVAL's or EVALSHA's arguments.
func scriptArgs(script string, keys, args []string) []any {
	argv := make([]any, 0, 2+len(keys)+len(args))
	argv = append(argv, script, len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	for _, a := range args {
		argv = append(argv, a)
	}
	return argv
}

// parseAcks reads WAIT's integer or WAITAOF's pair of integers.
func parseAcks(w dlm.Wait, reply any, err error) (dlm.Acks, error) {
	if err != nil {
		return dlm.Acks{}, err
	}
	var v []int64
	switch x := reply.(type) {
	case int64:
		v = []int64{x}
	case []any:
		for _, e := range x {
			i, ok := e.(int64)
			if !ok {
				return dlm.Acks{}, fmt.Errorf("reply element is %T, want an integer", e)
			}
			v = append(v, i)
		}
	default:
		return dlm.Acks{}, fmt.Errorf("reply is %T, want integers", reply)
	}
	return w.ParseAcks(v)
}
