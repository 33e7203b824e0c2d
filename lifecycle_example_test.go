package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/strategy"
)

func ExampleWithAutoRenew() {
	node, done := exampleNode()
	defer done()
	single, _ := strategy.NewSingle(node)
	// Renew after a third of the TTL; never hold a lock longer than an hour.
	m, _ := dlm.New(single, dlm.WithTTL(300*time.Millisecond), dlm.WithAutoRenew(1.0/3, time.Hour))
	ctx := context.Background()

	lock, _ := m.TryLock(ctx, "long-job")
	work := lock.Context()
	time.Sleep(700 * time.Millisecond) // more than two TTLs of work
	fmt.Println("still held:", work.Err() == nil)

	_ = lock.Unlock(ctx)
	<-work.Done()
	fmt.Println("lost:", errors.Is(context.Cause(work), dlm.ErrLost), "unlocked:", errors.Is(context.Cause(work), dlm.ErrUnlocked))
	// Output:
	// still held: true
	// lost: false unlocked: true
}
