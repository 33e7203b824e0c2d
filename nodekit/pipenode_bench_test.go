package nodekit_test

import (
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// BenchmarkPipeNodeLockUnlock is TryLock+Unlock through the single-instance
// strategy, per driver: two round trips, with the client's automatic pipelining (the default; then
// with fewer, fuller batches: a flush delay of up to 20µs, or one
// pipelining connection) and without it (a dedicated connection per call).
func BenchmarkPipeNodeLockUnlock(b *testing.B) {
	srv := redistest.Start(b)
	for _, d := range pipeDrivers {
		for _, tc := range []struct {
			name string
			opt  pipeOptions
		}{
			{"autopipelining", pipeOptions{addrs: []string{srv.Addr}}},
			{"autopipelining-flushdelay20us", pipeOptions{addrs: []string{srv.Addr}, maxFlushDelay: 20 * time.Microsecond}},
			{"autopipelining-1conn", pipeOptions{addrs: []string{srv.Addr}, pipelineMultiplex: -1}},
			{"dedicated", pipeOptions{addrs: []string{srv.Addr}, noAutoPipelining: true, blockingPoolSize: redistest.BenchGoroutines}},
		} {
			b.Run(d.name+"/"+tc.name, func(b *testing.B) {
				s, err := strategy.NewSingle(d.node(b, tc.opt))
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
}
