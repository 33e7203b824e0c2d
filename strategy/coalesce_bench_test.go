package strategy_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// serverCPU is the server's used_cpu_sys + used_cpu_user.
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// benchCoalescing runs Acquire and Release on distinct keys from 64
// goroutines through the strategy newStrategy builds over a go-redis client
// of addr, with calls coalesced (the default) and each by itself. It
// reports the server's CPU time per Acquire+Release pair (server-µs/op)
// beside the client's ns/op.
func benchCoalescing(b *testing.B, addr string, newStrategy func(driver.Node, ...strategy.Option) (driver.Strategy, error)) {
	for _, tc := range []struct {
		name string
		opts []strategy.Option
	}{
		{"coalesced", nil},
		{"alone", []strategy.Option{strategy.WithCoalescing(false)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchClient(b, addr)
			s, err := newStrategy(goredis.New(c), tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			cpu0 := serverCPU(b, c)
			b.RunParallel(func(pb *testing.PB) {
				key := "coalesce:" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					if _, err := s.Acquire(ctx, key, "t", 10*time.Second); err != nil {
						b.Error(err)
						return
					}
					if err := s.Release(ctx, key, "t"); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((serverCPU(b, c)-cpu0).Microseconds())/float64(b.N), "server-µs/op")
		})
	}
}

// BenchmarkCoalescing is benchCoalescing on the single-instance strategy.
func BenchmarkCoalescing(b *testing.B) {
	benchCoalescing(b, redistest.Start(b).Addr, func(n driver.Node, opts ...strategy.Option) (driver.Strategy, error) {
		return strategy.NewSingle(n, opts...)
	})
}

// BenchmarkCoalescingFailover is benchCoalescing on the failover strategy
// with AckAll on a primary with two replicas: coalesced, an acquisition's
// WAIT covers the batch it went out with.
func BenchmarkCoalescingFailover(b *testing.B) {
	topo := redistest.StartReplicated(b, redistest.ReplicatedOptions{})
	benchCoalescing(b, topo.Primary.Addr, func(n driver.Node, opts ...strategy.Option) (driver.Strategy, error) {
		return strategy.NewFailover(n, append(opts, strategy.WithAcks(strategy.AckAll()), strategy.WithReplicas(2))...)
	})
}
