package dlm_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/strategy"
)

// An operator finds who holds a lock and takes it back; the holder's next
// renewal (or Extend) fails with dlm.ErrRevoked.
func ExampleManager_Revoke() {
	node, done := exampleNode()
	defer done()
	single, _ := strategy.NewSingle(node)
	ctx := context.Background()

	worker, _ := dlm.New(single, dlm.WithOwner("billing-worker-3"))
	lock, err := worker.Lock(ctx, "invoices")
	if err != nil {
		panic(err)
	}

	ops, _ := dlm.New(single)
	info, err := ops.Inspect(ctx, "invoices")
	if err != nil {
		panic(err)
	}
	fmt.Println("held by", info.Holder.Owner, "with fence", info.Fence, "for a lease of", info.Holder.TTL)

	if _, err := ops.Revoke(ctx, "invoices", "alice", "stuck"); err != nil {
		panic(err)
	}
	err = lock.Extend(ctx, dlm.DefaultTTL)
	fmt.Println("revoked:", errors.Is(err, dlm.ErrRevoked), "context ended:", lock.Context().Err() != nil)

	next, _ := ops.TryLock(ctx, "invoices")
	fmt.Println("next fence", next.Fence())
	// Output:
	// held by billing-worker-3 with fence 1 for a lease of 10s
	// revoked: true context ended: true
	// next fence 3
}
