package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

// Redlock over five independent servers: the lock holds while any three of
// them answer, and a failure says what each server did.
func ExampleNewRedlock() {
	var nodes []driver.Node
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, goredis.New(c))
	}
	rl, err := strategy.NewRedlock(nodes, strategy.WithTimeout(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(rl, dlm.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lock, err := m.TryLock(ctx, "orders:42")
	var qe *strategy.QuorumError
	if errors.As(err, &qe) {
		fmt.Println("granted by", qe.NodesWith(strategy.Granted), "failed:", qe.NodesWith(strategy.Failed))
		return
	}
	if err != nil {
		panic(err)
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	fmt.Println("fence", lock.Fence(), "valid until", lock.Until())
}

// Redlock's lifecycle abilities, as the Manager uses them: auto-renewal
// extends all held locks in one pipelined batch per node
// (Redlock.ExtendMany), and Lock waits for a release notification from
// the nodes (Redlock.WatchRelease) instead of polling.
func ExampleRedlock_ExtendMany() {
	var nodes []driver.Node
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, goredis.New(c))
	}
	rl, err := strategy.NewRedlock(nodes)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// What auto-renewal does for every lock of a Manager at once.
	for i, r := range rl.ExtendMany(ctx, []driver.HeldKey{{Key: "orders:42", Token: "my-token"}}, 10*time.Second) {
		fmt.Println(i, r.Lease.Until, r.Err) // r.Err matches dlm.ErrNotHeld when a majority says the lock is gone
	}

	// A Manager finds both abilities by itself.
	m, err := dlm.New(rl, dlm.WithTTL(10*time.Second), dlm.WithAutoRenew(1.0/3, time.Hour))
	if err != nil {
		panic(err)
	}
	lock, err := m.Lock(ctx, "orders:42") // woken by the holder's release
	if err != nil {
		panic(err)
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	<-lock.Context().Done() // renewed until unlocked, or lost (context.Cause matches dlm.ErrLost)
}

// The amnesia guard: every client of the keys declares the longest lease it
// takes; a server that lost its data grants nothing until such a lease
// could have run out, and Lock waits for that like for a holder.
func ExampleWithMaxTTL() {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer c.Close()
	single, err := strategy.NewSingle(goredis.New(c), strategy.WithMaxTTL(30*time.Second))
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(single, dlm.WithTTL(10*time.Second)) // at most the MaxTTL
	if err != nil {
		panic(err)
	}
	lock, err := m.TryLock(context.Background(), "orders:42")
	var held *strategy.HeldError
	if errors.As(err, &held) && held.Quarantined {
		fmt.Println("the server lost its data; no grant for", held.Remaining)
		return
	}
	if err != nil {
		panic(err)
	}
	defer lock.Unlock(context.Background())
	fmt.Println("fence", lock.Fence())
}
