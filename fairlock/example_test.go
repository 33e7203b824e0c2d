package fairlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/fairlock"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv, err := miniredis.Run() // an in-process Redis; use your own client
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()

	single, _ := strategy.NewSingle(goredis.New(client))
	m, _ := dlm.New(single, dlm.WithTTL(10*time.Second))
	queue, err := fairlock.New(m, "nightly-report") // waiters served in arrival order
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	l, err := queue.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	fmt.Println("holding", l.Key(), "fence", l.Fence())
	// Output: holding nightly-report fence 1
}
