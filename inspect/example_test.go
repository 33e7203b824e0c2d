package inspect_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/strategy"
)

// An operator finds who holds a lock and takes it back; the holder's next
// renewal (or Extend) fails with dlm.ErrRevoked.
func ExampleRevoke() {
	srv := dlmtest.NewServer()
	defer srv.Close()
	node := srv.Node() // in production: a driver over your client, e.g. goredis.New(client)
	single, _ := strategy.NewSingle(node)
	ctx := context.Background()

	worker, _ := dlm.New(single, dlm.WithOwner("billing-worker-3"))
	lock, err := worker.Lock(ctx, "invoices")
	if err != nil {
		panic(err)
	}

	info, err := inspect.Key(ctx, single, "invoices")
	if err != nil {
		panic(err)
	}
	fmt.Println("held by", info.Holder.Owner, "with fence", info.Fence, "for a lease of", info.Holder.TTL)

	if _, err := inspect.Revoke(ctx, single, "invoices", "alice", "stuck"); err != nil {
		panic(err)
	}
	err = lock.Extend(ctx, dlm.DefaultTTL)
	fmt.Println("revoked:", errors.Is(err, dlm.ErrRevoked), "context ended:", lock.Context().Err() != nil)

	next, _ := worker.TryLock(ctx, "invoices")
	fmt.Println("next fence", next.Fence())
	// Output:
	// held by billing-worker-3 with fence 1 for a lease of 10s
	// revoked: true context ended: true
	// next fence 3
}
