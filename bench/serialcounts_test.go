package main

import (
	"context"
	"regexp"
	"runtime/metrics"
	"syscall"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/redistest"
)

// BenchmarkSerialContenders runs the serial scenario's loop (TryLock then
// Unlock of one key, under a context with a deadline) for the
// single-instance contenders over go-redis, rueidis, valkey-go and redigo
// that the serial scenario compares, on one local server. Besides time and
// allocations it reports, per pair, what the machine's load changes
// little: goroutines started, voluntary context switches (a thread put to
// sleep), this process's user and system CPU, and the server's CPU; it
// logs the server's INFO commandstats (each script's time on the server).
func BenchmarkSerialContenders(b *testing.B) {
	srv := redistest.Start(b)
	re := regexp.MustCompile(`^(dlm single/(goredis|rueidis|valkeygo|redigo)|bsm|redsync/(rueidis|redigo)|rueidislock)`)
	for _, c := range contenders {
		if c.Nodes != 1 || !re.MatchString(c.Name) || len(c.Scenarios) > 0 {
			continue
		}
		b.Run(c.Name, func(b *testing.B) {
			cfg := fullConfig() // the run's settings
			e := Env{Addrs: []string{srv.Addr}, TTL: cfg.TTL, NodeTimeout: cfg.NodeTimeout, RetryMin: cfg.RetryMin, RetryMax: cfg.RetryMax, PoolSize: cfg.PoolSize}
			l, err := c.New(e)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			key := "serial:" + c.Name
			for range 100 {
				h, err := l.TryLock(ctx, key)
				if err == nil {
					err = h.Unlock(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cs := goredislib.NewClient(&goredislib.Options{Addr: srv.Addr})
			defer cs.Close()
			if err := cs.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			st0, err := readStats(ctx, srv.Addr)
			if err != nil {
				b.Fatal(err)
			}
			g0, cs0, u0, s0 := created(), nvcsw(), utime(false), utime(true)
			for b.Loop() {
				h, err := l.TryLock(ctx, key)
				if err == nil {
					err = h.Unlock(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(created()-g0)/float64(b.N), "goroutines/op")
			b.ReportMetric(float64(nvcsw()-cs0)/float64(b.N), "ctxsw/op")
			st1, err := readStats(ctx, srv.Addr)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((st1.CPU-st0.CPU)*1e6/float64(b.N), "server-cpu-us/op")
			stats, err := cs.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			b.Log(stats)
			b.ReportMetric(float64((utime(false)-u0)/time.Microsecond)/float64(b.N), "user-us/op")
			b.ReportMetric(float64((utime(true)-s0)/time.Microsecond)/float64(b.N), "sys-us/op")
		})
	}
}

// created is how many goroutines the process has started.
func created() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// nvcsw is how many times the process's threads gave up a CPU to wait.
func nvcsw() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Nvcsw
}

// utime is the process's user CPU time so far, or its system CPU time.
func utime(sys bool) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	if sys {
		return time.Duration(ru.Stime.Nano())
	}
	return time.Duration(ru.Utime.Nano())
}
