package rwlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/rwlock"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv := dlmtest.NewServer() // an in-process Redis for the example
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)

	single, _ := strategy.NewSingle(node)
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
