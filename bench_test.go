package dlm_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// benchManagerOn returns a Manager over one server started for b, through
// the named client's driver: goredis, redigo or rueidis (ctxOnWire matters to
// goredis only).
func benchManagerOn(b *testing.B, client string, ctxOnWire bool, opts ...strategy.Option) *dlm.Manager {
	srv := redistest.Start(b)
	var node driver.Node
	switch client {
	case "goredis":
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: ctxOnWire})
		b.Cleanup(func() { c.Close() })
		node = goredis.New(c)
	default:
		dial := map[string]func(context.Context, nodekit.Endpoint) (driver.Node, io.Closer, error){
			"redigo": redigo.Dial, "rueidis": rueidis.Dial}[client]
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
			client, _, _ := strings.Cut(tc.name, "-")
			m := benchManagerOn(b, client, tc.ctxOnWire, tc.opts...)
			ctx, cancel := context.WithCancel(context.Background()) // a live Done channel, as in a server
			defer cancel()
			serialPairs(b, m, ctx)
		})
	}
}

// serialPairs runs TryLock and Unlock of one key on m, one pair after the
// other, after a Lock that waits out a fresh server's quarantine (with the
// guard). Besides allocations it reports the goroutines started and the
// threads put to sleep (voluntary context switches) per pair: counts that
// the machine's load changes little, unlike the time.
func serialPairs(b *testing.B, m *dlm.Manager, ctx context.Context) {
	l, err := m.Lock(ctx, "bench:serial") // BenchSerial's key: a connection in the pool
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	c0 := redistest.ReadCounts()
	redistest.BenchSerial(b, ctx, m)
	c0.ReportSince(b)
}

// BenchmarkLockUnlockParallel runs TryLock and Unlock on distinct keys from
// 64 goroutines, per driver, with calls coalesced (the default) and
// without a coalescing layer (alone); it reports the share of callers'
// runs that went in a batch with others.
func BenchmarkLockUnlockParallel(b *testing.B) {
	for _, client := range []string{"goredis", "rueidis"} {
		for _, mode := range []string{"coalesced", "alone"} {
			b.Run(client+"/"+mode, func(b *testing.B) {
				var opts []strategy.Option
				if mode == "alone" {
					opts = append(opts, strategy.WithCoalescing(false))
				}
				redistest.BenchParallel(b, benchManagerOn(b, client, true, opts...))
			})
		}
	}
}

// BenchmarkLockUnlockDeadline is BenchmarkLockUnlock with a context that
// has a deadline 10 minutes away, as bench's serial scenario calls it, and
// go-redis with ContextTimeoutEnabled: with a per-node timeout
// (strategy.WithTimeout) of 1s, which derives a context per call; of 1h,
// which the caller's deadline comes before ("-callerfirst"); and none.
func BenchmarkLockUnlockDeadline(b *testing.B) {
	for _, name := range []string{"goredis", "goredis-callerfirst", "goredis-notimeout", "rueidis", "rueidis-callerfirst", "rueidis-notimeout"} {
		b.Run(name, func(b *testing.B) {
			client, variant, _ := strings.Cut(name, "-")
			var opts []strategy.Option
			switch variant {
			case "":
				opts = append(opts, strategy.WithTimeout(time.Second))
			case "callerfirst":
				opts = append(opts, strategy.WithTimeout(time.Hour))
			}
			m := benchManagerOn(b, client, true, opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			serialPairs(b, m, ctx)
		})
	}
}
