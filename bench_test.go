package dlm_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

func benchManager(b *testing.B, ctxOnWire bool, opts ...strategy.Option) *dlm.Manager {
	return benchManagerOn(b, "goredis", ctxOnWire, opts...)
}

// benchManagerOn is benchManager over the named driver: goredis, redigo
// or rueidis (ctxOnWire matters to goredis only).
func benchManagerOn(b *testing.B, driver string, ctxOnWire bool, opts ...strategy.Option) *dlm.Manager {
	srv := redistest.Start(b)
	var node dlm.Node
	switch driver {
	case "goredis":
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: ctxOnWire})
		b.Cleanup(func() { c.Close() })
		node = goredis.New(c)
	default:
		dial := map[string]func(context.Context, nodekit.Endpoint) (dlm.Node, io.Closer, error){
			"redigo": redigo.Dial, "rueidis": rueidis.Dial}[driver]
		n, closer, err := dial(context.Background(), nodekit.Endpoint{Addr: srv.Addr})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { closer.Close() })
		node = n
	}
	s, err := strategy.NewSingle(node, opts...)
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
		{"goredis-alone", true, []strategy.Option{strategy.WithCoalescing(false)}},
		{"redigo", false, nil}, {"rueidis", false, nil}} {
		b.Run(tc.name, func(b *testing.B) {
			driver, _, _ := strings.Cut(tc.name, "-")
			m := benchManagerOn(b, driver, tc.ctxOnWire, tc.opts...)
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
