package main

import (
	"context"
	"regexp"
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
			c0 := redistest.ReadCounts()
			for b.Loop() {
				h, err := l.TryLock(ctx, key)
				if err == nil {
					err = h.Unlock(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			c0.ReportSince(b)
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
		})
	}
}
