package multilock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/multilock"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv := dlmtest.NewServer() // an in-process Redis for the example
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)

	single, _ := strategy.NewSingle(node)
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
