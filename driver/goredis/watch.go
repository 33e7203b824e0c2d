package goredis

// Watch's connection on one server: a redis.PubSub whose subscriptions a
// goroutine of its own sends, so that a caller waits no longer than its
// context.

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// openPubSub opens the Hub's connection, a redis.PubSub, and starts its
// dispatcher, which reports confirmations and messages until the PubSub
// closes. A redis.PubSub re-subscribes by itself after a broken connection,
// so Events.Broken is never called.
func (n *node) openPubSub(ctx context.Context, ev nodekit.Events) (nodekit.PubSub, error) {
	ps := n.c.Subscribe(ctx)
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go func() {
		for m := range ch {
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					ev.Subscribed(m.Channel)
				}
			case *redis.Message:
				ev.Message(m.Channel, m.Payload)
			}
		}
	}()
	return newOrdered(ps), nil
}

// An ordered is a redis.PubSub whose SUBSCRIBE and UNSUBSCRIBE a goroutine
// of its own sends, in the order they were asked for, while the caller
// waits only until its context ends: go-redis's dispatcher re-establishes
// a broken connection under the PubSub's lock, with a dial that does not
// know the caller's context (TestConformance/.../WatchDialDeadline).
type ordered struct {
	ps   *redis.PubSub
	ops  chan func()
	done chan struct{}
	once sync.Once
}

func newOrdered(ps *redis.PubSub) *ordered {
	o := &ordered{ps: ps, ops: make(chan func()), done: make(chan struct{})}
	go func() {
		for {
			select {
			case f := <-o.ops:
				f()
			case <-o.done:
				return
			}
		}
	}()
	return o
}

// do has f run in its turn and waits for it until ctx ends.
func (o *ordered) do(ctx context.Context, f func(context.Context) error) error {
	res := make(chan error, 1)
	select {
	case o.ops <- func() { res <- f(ctx) }:
	case <-o.done:
		return fmt.Errorf("%w: the pub/sub connection is closed", dlm.ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *ordered) Subscribe(ctx context.Context, channels ...string) error {
	return o.do(ctx, func(ctx context.Context) error { return o.ps.Subscribe(ctx, channels...) })
}

func (o *ordered) Unsubscribe(ctx context.Context, channels ...string) error {
	return o.do(ctx, func(ctx context.Context) error { return o.ps.Unsubscribe(ctx, channels...) })
}

func (o *ordered) Close() error {
	o.once.Do(func() { close(o.done) })
	return o.ps.Close()
}
