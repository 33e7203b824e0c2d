package goredis

// The wire: a batch's calls as EVALSHA or EVAL commands that go-redis
// never retries, sent alone or as one pipeline, RunWait's WAIT or WAITAOF
// after them.

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/nodekit"
)

// do sends calls, and w's command wcmd after them unless it is nil, and
// sets every call's Reply or Err. With wcmd it returns the wait's reply, or
// the first failed call's error, or the wait's.
func (n *node) do(ctx context.Context, calls []driver.Call, w *driver.Wait, wcmd []string, b *argBuf) (driver.Acks, error) {
	b.grow(calls)
	if wcmd == nil && len(calls) == 1 {
		cmd := b.newCmd(ctx, &calls[0])
		_ = n.c.Process(ctx, scriptCmd{cmd})
		n.setReply(&calls[0], cmd)
		return driver.Acks{}, nil
	}
	var p redis.Pipeliner
	if wcmd == nil {
		p = n.c.Pipeline()
	} else if m, err := n.pinned(ctx, calls); err != nil {
		nodekit.Fail(calls, err)
		return driver.Acks{}, err
	} else {
		p = m.Pipeline()
	}
	cmds := make([]*redis.Cmd, len(calls))
	for i := range calls {
		cmds[i] = b.newCmd(ctx, &calls[i])
		_ = p.Process(ctx, scriptCmd{cmds[i]})
	}
	var wc *redis.Cmd
	if wcmd != nil {
		args := make([]any, len(wcmd))
		for i, s := range wcmd {
			args[i] = s
		}
		wc = p.Do(ctx, args...)
	}
	_, _ = p.Exec(ctx) // each command keeps its own reply or error
	for i, cmd := range cmds {
		n.setReply(&calls[i], cmd)
	}
	if wc == nil {
		return driver.Acks{}, nil
	}
	for i := range calls {
		if calls[i].Err != nil {
			return driver.Acks{}, calls[i].Err
		}
	}
	v, err := wc.Result()
	if err == nil {
		var acks driver.Acks
		if acks, err = nodekit.ParseAcks(*w, v); err == nil {
			return acks, nil
		}
	}
	return driver.Acks{}, fmt.Errorf("dlm: %s after the scripts: %w", wcmd[0], replyErr(err, n.master))
}

// A scriptCmd is a script call's command, which go-redis never retries,
// whatever the client's MaxRetries: the script may have run before the
// connection broke or the read timed out.
type scriptCmd struct{ *redis.Cmd }

func (scriptCmd) NoRetry() bool { return true }

// An argBuf holds the command lists of a batch's script commands. It is
// reused once the commands completed: go-redis reads a command's arguments
// until then.
type argBuf struct{ args []any }

var argBufs = sync.Pool{New: func() any { return new(argBuf) }}

// grow makes room for the commands of calls, so that appending them moves
// the array at most once, here (the commands made first keep pointing into
// it).
func (b *argBuf) grow(calls []driver.Call) {
	n := 0
	for i := range calls {
		n += 3 + len(calls[i].Keys) + len(calls[i].Args)
	}
	b.args = slices.Grow(b.args, n)
}

// reset empties b; a large array is dropped rather than kept.
func (b *argBuf) reset() {
	clear(b.args)
	b.args = b.args[:0]
	if cap(b.args) > 1024 {
		b.args = nil
	}
}

// newCmd returns c as an EVALSHA or EVAL command, its arguments appended
// to b as strings: the caller may reuse c's slices while an abandoned
// command is still being read.
func (b *argBuf) newCmd(ctx context.Context, c *driver.Call) *redis.Cmd {
	a0 := len(b.args)
	if c.Source == "" {
		b.args = append(b.args, "evalsha", c.SHA1, len(c.Keys))
	} else {
		b.args = append(b.args, "eval", c.Source, len(c.Keys))
	}
	for _, s := range c.Keys {
		b.args = append(b.args, s)
	}
	for _, s := range c.Args {
		b.args = append(b.args, s)
	}
	cmd := redis.NewCmd(ctx, b.args[a0:len(b.args):len(b.args)]...)
	if len(c.Keys) > 0 {
		cmd.SetFirstKeyPos(3) // the Cluster routes by the first key
	}
	return cmd
}
