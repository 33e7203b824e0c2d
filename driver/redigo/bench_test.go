package redigo_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// BenchmarkLockUnlock is TryLock+Unlock through the single-instance strategy:
// two round trips.
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	p := newPool(b, srv.Addr)
	p.MaxIdle = redistest.BenchGoroutines
	s, err := strategy.NewSingle(redigo.New(p).WithName(srv.Addr))
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s)
	if err != nil {
		b.Fatal(err)
	}
	redistest.BenchLockUnlock(b, m)
}

// BenchmarkLockUnlockDeadline is the serial pair as bench/ measures it: a
// strategy WithTimeout bound under a caller's context with a deadline, so
// every call runs under a context that can end.
func BenchmarkLockUnlockDeadline(b *testing.B) {
	srv := redistest.Start(b)
	s, err := strategy.NewSingle(redigo.New(benchPool(b, srv.Addr)).WithName(srv.Addr), strategy.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s)
	if err != nil {
		b.Fatal(err)
	}
	deadlinePairs(b, m)
}

// benchPool returns a pool to addr built as bench/ builds it: MaxIdle =
// MaxActive = 128, Wait, read and write timeouts at the per-node timeout.
func benchPool(b *testing.B, addr string) *redis.Pool {
	p := &redis.Pool{
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialReadTimeout(time.Second),
				redis.DialWriteTimeout(time.Second), redis.DialConnectTimeout(time.Second))
		},
		MaxIdle: 128, MaxActive: 128, IdleTimeout: time.Minute, Wait: true,
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// redlockManager returns a Manager over Redlock on five servers, each
// through a benchPool.
func redlockManager(b *testing.B) *dlm.Manager {
	var nodes []driver.Node
	for _, s := range redistest.StartN(b, 5) {
		nodes = append(nodes, redigo.New(benchPool(b, s.Addr)).WithName(s.Addr))
	}
	s, err := strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkRedlockParallel is BenchParallel over redlockManager.
func BenchmarkRedlockParallel(b *testing.B) { redistest.BenchParallel(b, redlockManager(b)) }

// BenchmarkRedlockDeadline is the serial pair over redlockManager under a
// caller's context with a deadline, as bench/ measures it.
func BenchmarkRedlockDeadline(b *testing.B) {
	m := redlockManager(b)
	deadlinePairs(b, m)
}

// deadlinePairs runs m's TryLock and Unlock of one key under a caller's
// context with a deadline, as bench/ does.
func deadlinePairs(b *testing.B, m *dlm.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	redistest.BenchSerial(b, ctx, m)
}
