package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

// exampleClient returns a go-redis client of an in-process Redis, so the
// examples run anywhere. Use your own client instead.
func exampleClient() (*redis.Client, func()) {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return c, func() { c.Close(); srv.Close() }
}

func Example() {
	client, done := exampleClient()
	defer done()

	// README: begin
	// client is your go-redis client, e.g.
	// redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	single, err := strategy.NewSingle(goredis.New(client))
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(single, dlm.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	lock, err := m.Lock(ctx, "orders:42") // waits while someone else holds it, until ctx ends
	if err != nil {
		panic(err) // errors.Is(err, dlm.ErrNotAcquired); errors.Is(err, context.DeadlineExceeded) when ctx ran out
	}
	defer lock.Unlock(context.WithoutCancel(ctx))

	// Work under the lock, stopping if the lease can no longer be trusted, and
	// pass the fence with every write so storage can refuse stale holders.
	work := lock.Context()
	fmt.Println("holding", lock.Key(), "with fence", lock.Fence(), "live:", work.Err() == nil)
	// README: end

	// Output: holding orders:42 with fence 1 live: true
}

func ExampleManager_TryLock() {
	client, done := exampleClient()
	defer done()
	single, _ := strategy.NewSingle(goredis.New(client))
	m, _ := dlm.New(single)
	ctx := context.Background()

	first, _ := m.TryLock(ctx, "report")
	_, err := m.TryLock(ctx, "report")
	var held *strategy.HeldError
	fmt.Println(errors.Is(err, dlm.ErrNotAcquired), errors.As(err, &held))

	_ = first.Unlock(ctx)
	second, err := m.TryLock(ctx, "report")
	fmt.Println(err == nil, second.Fence() > first.Fence())
	// Output:
	// true true
	// true true
}

func ExampleLock_Extend() {
	client, done := exampleClient()
	defer done()
	single, _ := strategy.NewSingle(goredis.New(client))
	m, _ := dlm.New(single, dlm.WithTTL(time.Second))
	ctx := context.Background()

	lock, _ := m.TryLock(ctx, "batch")
	before := lock.Until()
	if err := lock.Extend(ctx, time.Minute); err != nil {
		fmt.Println("lost:", errors.Is(err, dlm.ErrNotHeld))
		return
	}
	fmt.Println("extended:", lock.Until().Sub(before) > 50*time.Second)
	_ = lock.Unlock(ctx)
	// Output: extended: true
}

func ExampleLock_Context() {
	client, done := exampleClient()
	defer done()
	single, _ := strategy.NewSingle(goredis.New(client))
	m, _ := dlm.New(single)
	ctx := context.Background()

	lock, _ := m.TryLock(ctx, "job")
	work := lock.Context()
	_ = lock.Unlock(ctx)
	<-work.Done()
	fmt.Println(context.Cause(work))
	// Output: dlm: lock released
}
