package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/semaphore"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv := dlmtest.NewServer() // an in-process Redis for the example
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)

	single, _ := strategy.NewSingle(node)
	m, _ := dlm.New(single, dlm.WithTTL(10*time.Second))
	// At most two exports at a time, across every process that names it alike.
	exports, err := semaphore.New(m, "exports", 2)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	a, _ := exports.Acquire(ctx)
	b, _ := exports.Acquire(ctx)
	_, err = exports.TryAcquire(ctx)
	fmt.Println("third:", errors.Is(err, dlm.ErrNotAcquired))

	_ = a.Unlock(ctx) // give a permit back
	c, err := exports.Acquire(ctx)
	fmt.Println("after a release:", err == nil, c.Key() == a.Key())
	_ = b.Unlock(ctx)
	_ = c.Unlock(ctx)
	// Output:
	// third: true
	// after a release: true true
}
