package redigo_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/strategy"
)

// A Node over a pool to one server, named by the server's address (a pool
// does not know it). The example needs a running server, so it has no
// output.
func ExampleNew() {
	const addr = "localhost:6379"
	pool := &redis.Pool{
		MaxIdle: 16,
		Dial: func() (redis.Conn, error) {
			return redis.Dial("tcp", addr, redis.DialReadTimeout(time.Second))
		},
	}
	defer pool.Close()
	s, err := strategy.NewSingle(redigo.New(pool).WithName(addr))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := dlm.New(s)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	// work under lock.Context(), passing lock.Fence() to storage
}

// A pool that follows the primary Sentinel names, for the failover
// strategy: Sentinels that require a password (requirepass in
// sentinel.conf) and a primary that requires another. The node is named by
// the master's name. The example needs running Sentinels, so it has no
// output.
func ExampleSentinels_Dial() {
	sentinels := redigo.Sentinels{
		Addrs:       []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		Master:      "mymaster",
		DialOptions: []redis.DialOption{redis.DialPassword("sentinel-secret")},
	}
	pool := &redis.Pool{
		MaxIdle: 16,
		DialContext: sentinels.Dial(redis.DialPassword("primary-secret"),
			redis.DialReadTimeout(time.Second)), // above the failover strategy's wait timeout
		TestOnBorrow: func(c redis.Conn, idleSince time.Time) error {
			if time.Since(idleSince) < time.Second {
				return nil
			}
			return redigo.CheckPrimary(c) // drop idle connections to a demoted primary
		},
	}
	defer pool.Close()
	f, err := strategy.NewFailover(redigo.New(pool).WithName(sentinels.Master), strategy.WithAcks(strategy.AckAll()))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := dlm.New(f, dlm.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	// work under lock.Context(), passing lock.Fence() to storage
}
