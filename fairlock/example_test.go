package fairlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/fairlock"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv := dlmtest.NewServer() // an in-process Redis for the example
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)

	single, _ := strategy.NewSingle(node)
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
