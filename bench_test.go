package dlm_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func benchManager(b *testing.B, ctxOnWire bool, opts ...strategy.Option) *dlm.Manager {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: ctxOnWire})
	b.Cleanup(func() { c.Close() })
	s, err := strategy.NewSingle(goredis.New(c), opts...)
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s, dlm.WithTTL(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkLockUnlock is one uncontended TryLock and Unlock: two round
// trips; "maxttl" with the amnesia guard on, "alone" without coalescing
// (which a serial caller must not pay for).
func BenchmarkLockUnlock(b *testing.B) {
	for _, tc := range []struct {
		name      string
		ctxOnWire bool
		opts      []strategy.Option
	}{{"goredis", true, nil}, {"goredis-noctxtimeout", false, nil}, {"goredis-maxttl", true, []strategy.Option{strategy.WithMaxTTL(time.Second)}},
		{"goredis-alone", true, []strategy.Option{strategy.WithCoalescing(false)}}} {
		b.Run(tc.name, func(b *testing.B) {
			m := benchManager(b, tc.ctxOnWire, tc.opts...)
			ctx, cancel := context.WithCancel(context.Background()) // a live Done channel, as in a server
			defer cancel()
			l, err := m.Lock(ctx, "bench") // a fresh server's quarantine, with the guard
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				l, err := m.TryLock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLockUnlockParallel runs TryLock and Unlock on distinct keys from
// GOMAXPROCS×16 goroutines, with calls coalesced (the default) and each
// call by itself.
func BenchmarkLockUnlockParallel(b *testing.B) {
	for _, tc := range []struct {
		name string
		on   bool
	}{{"coalesced", true}, {"alone", false}} {
		b.Run(tc.name, func(b *testing.B) {
			m := benchManager(b, true, strategy.WithCoalescing(tc.on))
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				key := "bench:" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					l, err := m.TryLock(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
