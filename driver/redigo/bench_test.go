package redigo_test

import (
	"context"
	"testing"

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
	redistest.BenchLockUnlock(b, func(ctx context.Context, key string) error {
		l, err := m.TryLock(ctx, key)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	})
}
