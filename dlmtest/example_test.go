package dlmtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// chargeOnce is the code under test: a worker charges an order under a
// lock, passing the lock's fence to the payment store.
func chargeOnce(ctx context.Context, m *dlm.Manager, order string, charge func(fence uint64)) error {
	lock, err := m.TryLock(ctx, "charge:"+order)
	if err != nil {
		return err
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	charge(lock.Fence())
	return nil
}

// A test of code that takes a lock, with no Redis server: two workers,
// each its own client of one in-process server.
func Example() {
	srv := dlmtest.NewServer()
	defer srv.Close()
	worker := func() *dlm.Manager {
		single, _ := strategy.NewSingle(srv.Node()) // a program passes its own Node
		m, _ := dlm.New(single)
		return m
	}
	a, b := worker(), worker()
	ctx := context.Background()

	// While a charges, b is refused.
	_ = chargeOnce(ctx, a, "42", func(fence uint64) {
		err := chargeOnce(ctx, b, "42", func(uint64) { fmt.Println("b charged too!") })
		fmt.Println("a charges with fence", fence, "- b:", errors.Is(err, dlm.ErrNotAcquired))
	})
	// Afterwards b gets the lock, with a larger fence.
	_ = chargeOnce(ctx, b, "42", func(fence uint64) { fmt.Println("b charges with fence", fence) })

	// A paused server answers nobody: the call ends with its context.
	srv.Pause()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := chargeOnce(cctx, a, "43", func(uint64) {})
	fmt.Println("paused:", errors.Is(err, context.DeadlineExceeded))
	srv.Resume()
	// Output:
	// a charges with fence 1 - b: true
	// b charges with fence 2
	// paused: true
}
