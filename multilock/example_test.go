package multilock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/multilock"
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
	m, _ := dlm.New(single, dlm.WithTTL(10*time.Second), dlm.WithAutoRenew(0.5, time.Hour))
	ctx := context.Background()

	// A transfer locks both accounts; another transfer naming them the other
	// way round takes them in the same order, so the two never deadlock.
	set, err := multilock.Lock(ctx, m, "account:7", "account:3")
	if err != nil {
		panic(err)
	}
	defer set.Unlock(context.WithoutCancel(ctx))
	fmt.Println(set.Keys(), set.Context().Err() == nil, set.Fence("account:3"))
	// Output: [account:3 account:7] true 1
}
