package valkeygo_test

import (
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm"
	valkeynode "github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// BenchmarkLockUnlock is TryLock+Unlock through the single-instance strategy:
// two round trips, with valkey-go's automatic pipelining (the default; then
// with fewer, fuller batches: a flush delay of up to 20µs, or one
// pipelining connection) and without it (a dedicated connection per call).
func BenchmarkLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	for _, tc := range []struct {
		name string
		opt  valkey.ClientOption
	}{
		{"autopipelining", valkey.ClientOption{InitAddress: []string{srv.Addr}}},
		{"autopipelining-flushdelay20us", valkey.ClientOption{InitAddress: []string{srv.Addr}, MaxFlushDelay: 20 * time.Microsecond}},
		{"autopipelining-1conn", valkey.ClientOption{InitAddress: []string{srv.Addr}, PipelineMultiplex: -1}},
		{"dedicated", valkey.ClientOption{InitAddress: []string{srv.Addr}, DisableAutoPipelining: true, BlockingPoolSize: redistest.BenchGoroutines}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := strategy.NewSingle(valkeynode.New(newClient(b, tc.opt)))
			if err != nil {
				b.Fatal(err)
			}
			m, err := dlm.New(s)
			if err != nil {
				b.Fatal(err)
			}
			redistest.BenchLockUnlock(b, m)
		})
	}
}
