package redistest

import (
	"context"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
)

// BenchGoroutines is how many goroutines BenchLockUnlock's parallel
// benchmark runs.
const BenchGoroutines = 64

// BenchLockUnlock runs sub-benchmarks of m's TryLock and Unlock of one
// lock: "serial", on one key ("serial-cancelable" with a context that can
// end, as a server's request has), and "parallel", from BenchGoroutines
// goroutines (rounded down to a multiple of GOMAXPROCS) on distinct keys.
// All report allocations and ops/s (lock+unlock pairs per second).
func BenchLockUnlock(b *testing.B, m *dlm.Manager) {
	b.Run("serial", func(b *testing.B) { BenchSerial(b, context.Background(), m) })
	b.Run("serial-cancelable", func(b *testing.B) { // a live Done channel, as a server's request has
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		BenchSerial(b, ctx, m)
	})
	b.Run("parallel", func(b *testing.B) { BenchParallel(b, m) })
}

// lockUnlock takes key and releases it.
func lockUnlock(ctx context.Context, m *dlm.Manager, key string) error {
	l, err := m.TryLock(ctx, key)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// BenchSerial measures m's TryLock and Unlock of one key under ctx in a
// loop, reporting allocations and ops/s.
func BenchSerial(b *testing.B, ctx context.Context, m *dlm.Manager) {
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if err := lockUnlock(ctx, m, "bench:serial"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchParallel measures m's TryLock and Unlock from BenchGoroutines
// goroutines (rounded down to a multiple of GOMAXPROCS) on distinct keys,
// reporting allocations and ops/s. The timer starts here.
func BenchParallel(b *testing.B, m *dlm.Manager) {
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(max(1, BenchGoroutines/runtime.GOMAXPROCS(0))) // RunParallel starts parallelism×GOMAXPROCS goroutines
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:parallel:" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			if err := lockUnlock(ctx, m, key); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// Counts are what the process has done so far that a machine's load
// changes little: goroutines started, times its threads gave up a CPU to
// wait (voluntary context switches), and its user and system CPU time.
type Counts struct {
	Goroutines uint64
	Switches   int64
	User, Sys  time.Duration
}

// ReadCounts reads the process's Counts.
func ReadCounts() Counts {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return Counts{Goroutines: s[0].Value.Uint64(), Switches: ru.Nvcsw,
		User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}
}

// ReportSince reports, per operation of b, what the process did since c0:
// goroutines/op, ctxsw/op, user-us/op and sys-us/op.
func (c0 Counts) ReportSince(b *testing.B) {
	c, n := ReadCounts(), float64(b.N)
	b.ReportMetric(float64(c.Goroutines-c0.Goroutines)/n, "goroutines/op")
	b.ReportMetric(float64(c.Switches-c0.Switches)/n, "ctxsw/op")
	b.ReportMetric(float64((c.User-c0.User)/time.Microsecond)/n, "user-us/op")
	b.ReportMetric(float64((c.Sys-c0.Sys)/time.Microsecond)/n, "sys-us/op")
}
