package rwlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/rwlock"
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
	config, err := rwlock.New(m, "config", 16) // up to 16 readers at a time
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	w, _ := config.Lock(ctx) // a writer: alone
	fmt.Println("writer", w.Write(), "fence", w.Fence())
	_ = w.Unlock(ctx)

	r1, _ := config.RLock(ctx) // readers share
	r2, _ := config.RLock(ctx)
	fmt.Println("readers after it:", r1.Fence() > w.Fence(), r2.Fence() > w.Fence())
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	// Output:
	// writer true fence 1
	// readers after it: true true
}
