package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// BenchmarkLockUnlock is TryLock+Unlock through the single-instance strategy:
// two round trips.
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2 * redistest.BenchGoroutines, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	s, err := strategy.NewSingle(goredis.New(c))
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s)
	if err != nil {
		b.Fatal(err)
	}
	redistest.BenchLockUnlock(b, m)
}
