package redigo_test

import (
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
	redistest.BenchLockUnlock(b, m)
}
