package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

// Redlock over five independent servers: the lock holds while any three of
// them answer, and a failure says what each server did.
func ExampleNewRedlock() {
	var nodes []dlm.Node
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, goredis.New(c))
	}
	rl, err := strategy.NewRedlock(nodes, strategy.WithTimeout(50*time.Millisecond), strategy.WithMaxHold(time.Minute))
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
