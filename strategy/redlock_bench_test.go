package strategy_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func benchClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, MaxRetries: -1, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// benchManager returns a Manager over one server (single-instance
// strategy) and one over five (Redlock), with the same client settings.
func benchManager(b *testing.B, n int, opts ...strategy.Option) (*dlm.Manager, *cluster) {
	c := startClusterWith(b, n, func(t testing.TB, addr string) *redis.Client { return benchClient(b, addr) })
	var s driver.Strategy
	var err error
	if n == 1 {
		s, err = strategy.NewSingle(c.nodes[0])
	} else {
		s, err = strategy.NewRedlock(c.nodes, opts...)
	}
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return m, c
}

// BenchmarkRedlockLockUnlock is one uncontended TryLock and Unlock in a
// loop: single-node strategy against Redlock over five servers.
func BenchmarkRedlockLockUnlock(b *testing.B) {
	for _, n := range []int{1, 5} {
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			m, _ := benchManager(b, n)
			redistest.BenchSerial(b, context.Background(), m)
		})
	}
}

// BenchmarkRedlockParallel runs TryLock and Unlock on distinct keys from 64
// goroutines; ops/s is lock+unlock pairs per second. With 64 callers on two
// cores a call waits tens of milliseconds for the CPU, so the per-node
// timeout is raised to 1s here. The rueidis rows use its automatic
// pipelining: concurrent calls to one server share its socket writes.
func BenchmarkRedlockParallel(b *testing.B) {
	for _, n := range []int{1, 5} {
		b.Run("nodes="+strconv.Itoa(n), func(b *testing.B) {
			m, _ := benchManager(b, n, strategy.WithTimeout(time.Second))
			redistest.BenchParallel(b, m)
		})
	}
	for _, n := range []int{1, 5} {
		b.Run("rueidis/nodes="+strconv.Itoa(n), func(b *testing.B) {
			var nodes []driver.Node
			for _, s := range redistest.StartN(b, n) {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(c.Close)
				nodes = append(nodes, rueidisnode.New(c))
			}
			var s driver.Strategy
			var err error
			if n == 1 {
				s, err = strategy.NewSingle(nodes[0])
			} else {
				s, err = strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
			}
			if err != nil {
				b.Fatal(err)
			}
			m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			redistest.BenchParallel(b, m)
		})
	}
}

// BenchmarkRedlockOneSilent measures TryLock latency with one of five
// servers frozen (SIGSTOP): p50 and p99 are reported in microseconds.
func BenchmarkRedlockOneSilent(b *testing.B) {
	m, c := benchManager(b, 5)
	ctx := context.Background()
	l, err := m.TryLock(ctx, "warm")
	if err != nil {
		b.Fatal(err)
	}
	_ = l.Unlock(ctx)
	c.freeze(b, 2)
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		l, err := m.TryLock(ctx, "bench")
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(strategy.DefaultNodeTimeoutForTest.Microseconds()), "node-timeout-µs")
}

// instantNode answers every script at once, in process, without Redis: it
// measures what Redlock's own machinery costs (fan-out to goroutines, quorum
// counting, timers, allocations). It is a measuring tool only; every test
// runs against real servers.
type instantNode struct{ name string }

func (n instantNode) Run(_ context.Context, calls []driver.Call) {
	for i := range calls {
		if calls[i].Keys[0] == "dlm:{probe}" { // the server's run_id, asked at first use
			calls[i].Reply = []int64{int64(len(n.name)), int64(n.name[len(n.name)-1]), 0, 0}
			continue
		}
		if len(calls[i].Keys) == 2 {
			calls[i].Reply = []int64{1} // acquire, extend: granted, fence 1
		} else {
			calls[i].Reply = []int64{1} // release, fence write-back
		}
	}
}

func (n instantNode) RunWait(context.Context, []driver.Call, driver.Wait) (driver.Acks, error) {
	return driver.Acks{}, errors.ErrUnsupported
}

func (n instantNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

func (n instantNode) String() string { return n.name }

// BenchmarkRedlockOverhead is TryLock+Unlock over five instant in-process
// nodes: Redlock's cost without any network or server. The per-node
// timeout is fixed at 2s: in the parallel case 64 goroutines of pure CPU
// work share the machine's cores, and a runnable goroutine at times waits
// tens of milliseconds for one (up to 108ms on 2 cores, with or without
// coalescing), which the adaptive timeout's 50ms floor counted as the
// nodes' silence and failed the benchmark.
func BenchmarkRedlockOverhead(b *testing.B) {
	var nodes []driver.Node
	for i := range 5 {
		nodes = append(nodes, instantNode{name: "instant" + strconv.Itoa(i)})
	}
	s, err := strategy.NewRedlock(nodes, strategy.WithTimeout(2*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) { redistest.BenchSerial(b, context.Background(), m) })
	b.Run("parallel", func(b *testing.B) { redistest.BenchParallel(b, m) })
}
