package inspect_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/strategy"
	"github.com/redis/go-redis/v9"
)

func exampleClient() (*redis.Client, func()) {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return c, func() { c.Close(); srv.Close() }
}

// An operator finds who holds a lock and takes it back; the holder's next
// renewal (or Extend) fails with dlm.ErrRevoked.
func ExampleRevoke() {
	client, done := exampleClient()
	defer done()
	single, _ := strategy.NewSingle(goredis.New(client))
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
