package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/semaphore"
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
