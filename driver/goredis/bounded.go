package goredis

// Calls within their context. go-redis puts a context's deadline on the
// socket only with ContextTimeoutEnabled and never watches cancellation:
// a call that could outlive its context runs in a goroutine of the node's
// (a flight), and the caller returns when the context ends.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/nodekit"
)

// bounded runs calls, and then w's command unless w is nil, within ctx
// (see the package documentation). On the goroutine path the commands work
// on a private copy of calls, copied back only when they finish in time, so
// an abandoned goroutine never writes into calls.
func (n *node) bounded(ctx context.Context, calls []driver.Call, w *driver.Wait) (_ driver.Acks, err error) {
	if cc, ok := n.c.(*redis.ClusterClient); ok {
		defer func() { followTopology(cc, calls, err) }()
	}
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, nil
	}
	var wcmd []string
	err = ctx.Err()
	if w != nil && err == nil {
		wcmd, err = nodekit.WaitCommand(*w)
	}
	if err != nil {
		nodekit.Fail(calls, err)
		return driver.Acks{}, err
	}
	if _, ok := ctx.Deadline(); ctx.Done() == nil || ok && n.ctxOnWire {
		b := argBufs.Get().(*argBuf)
		acks, err := n.do(ctx, calls, w, wcmd, b)
		b.reset()
		argBufs.Put(b)
		for i := range calls {
			calls[i].Err = deadlineErr(ctx, calls[i].Err)
		}
		return acks, deadlineErr(ctx, err)
	}
	f := flights.Get().(*flight)
	f.n, f.ctx, f.w, f.wcmd = n, ctx, w, wcmd
	f.own = append(f.own[:0], calls...)
	n.flights.Go(f)
	select {
	case <-f.end:
		copy(calls, f.own)
		acks, err := f.acks, f.err
		f.reset()
		flights.Put(f)
		return acks, err
	case <-ctx.Done():
		f.mu.Lock()
		f.abandoned = true
		copy(calls, f.own[:f.done])
		nodekit.Fail(calls[f.done:], ctx.Err())
		f.mu.Unlock()
		return driver.Acks{}, ctx.Err()
	}
}

// A flight is a batch that runs in a goroutine of its own (see bounded),
// on a private copy of its calls, its commands' arguments in buf. The
// goroutine signals end last and then no longer touches the flight, so a
// flight whose end was received is reused; an abandoned one, whose
// commands go-redis may still read, is left to the goroutine.
type flight struct {
	n    *node
	ctx  context.Context
	w    *driver.Wait
	wcmd []string
	own  []driver.Call
	buf  argBuf
	acks driver.Acks
	err  error
	end  chan struct{} // buffered: the goroutine never waits on it

	mu        sync.Mutex
	done      int // own[:done] hold their replies and are no longer written
	abandoned bool
}

var flights = sync.Pool{New: func() any { return &flight{end: make(chan struct{}, 1)} }}

func (f *flight) run() {
	if f.w != nil || len(f.own) <= chunk {
		f.acks, f.err = f.n.do(f.ctx, f.own, f.w, f.wcmd, &f.buf)
		f.end <- struct{}{}
		return
	}
	for lo := 0; lo < len(f.own); lo += chunk {
		if err := f.ctx.Err(); err != nil {
			nodekit.Fail(f.own[lo:], err)
			break
		}
		hi := min(lo+chunk, len(f.own))
		_, _ = f.n.do(f.ctx, f.own[lo:hi], nil, nil, &f.buf)
		f.mu.Lock()
		f.done = hi
		stop := f.abandoned
		f.mu.Unlock()
		if stop {
			return
		}
	}
	f.end <- struct{}{}
}

// reset clears a finished flight for reuse; a large copy of calls is
// dropped rather than kept.
func (f *flight) reset() {
	clear(f.own)
	f.own = f.own[:0]
	if cap(f.own) > 16 {
		f.own = nil
	}
	f.buf.reset()
	f.n, f.ctx, f.w, f.wcmd, f.acks, f.err, f.done, f.abandoned = nil, nil, nil, nil, driver.Acks{}, nil, 0, false
}

// chunk is how many calls of a batch one pipeline sends when the batch
// runs in a goroutine of its own (the client does not put the context's
// deadline on its sockets): the pipelines go one after the other, and when
// the context ends the calls of those that finished keep their replies.
const chunk = 128

// deadlineErr wraps a socket timeout with context.DeadlineExceeded once
// ctx's deadline has passed: the deadline on the socket was ctx's, and a
// script command is not retried, so go-redis returns the timeout as it is.
func deadlineErr(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}
