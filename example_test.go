package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// exampleNode returns a Node of an in-process Redis (package dlmtest), so
// the examples run anywhere. A program passes a Node over its own client.
func exampleNode() (driver.Node, func()) {
	srv := dlmtest.NewServer()
	return srv.Node(), srv.Close
}

func Example() {
	node, done := exampleNode()
	defer done()

	// README: begin
	// node is your Redis client as a driver.Node, e.g. goredis.New(redis.NewClient(
	// &redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true}))
	single, err := strategy.NewSingle(node)
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
	node, done := exampleNode()
	defer done()
	single, _ := strategy.NewSingle(node)
	m, _ := dlm.New(single)
	ctx := context.Background()

	first, _ := m.TryLock(ctx, "report")
	_, err := m.TryLock(ctx, "report")
	fmt.Println(errors.Is(err, dlm.ErrNotAcquired), errors.Is(err, dlm.ErrHeld))

	_ = first.Unlock(ctx)
	second, err := m.TryLock(ctx, "report")
	fmt.Println(err == nil, second.Fence() > first.Fence())
	// Output:
	// true true
	// true true
}

func ExampleLock_Extend() {
	node, done := exampleNode()
	defer done()
	single, _ := strategy.NewSingle(node)
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
	node, done := exampleNode()
	defer done()
	single, _ := strategy.NewSingle(node)
	m, _ := dlm.New(single)
	ctx := context.Background()

	lock, _ := m.TryLock(ctx, "job")
	work := lock.Context()
	_ = lock.Unlock(ctx)
	<-work.Done()
	fmt.Println(context.Cause(work))
	// Output: dlm: lock released
}
