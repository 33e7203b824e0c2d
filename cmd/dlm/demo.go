package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "Redis address host:port (default: an embedded in-process Redis)")
	workers := fs.Int("workers", 8, "concurrent workers")
	duration := fs.Duration("duration", 3*time.Second, "how long the workers run")
	hold := fs.Duration("hold", time.Millisecond, "how long each worker holds the lock")
	ttl := fs.Duration("ttl", 5*time.Second, "lock TTL")
	key := fs.String("key", "dlm-demo", "lock key")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *workers < 1 || *duration <= 0 || *hold < 0 {
		fmt.Fprintln(stderr, "dlm demo: --workers must be at least 1, --duration positive, --hold not negative")
		return 2
	}

	target := *addr
	where := "Redis at " + target
	if target == "" {
		srv, stop, err := startEmbedded()
		if err != nil {
			fmt.Fprintln(stderr, "dlm demo:", err)
			return 1
		}
		defer stop()
		target, where = srv, "1 embedded Redis node (miniredis, in-process)"
	}
	client := redis.NewClient(&redis.Options{Addr: target, ContextTimeoutEnabled: true})
	defer client.Close()
	single, err := strategy.NewSingle(goredis.New(client), strategy.WithTimeout(time.Second))
	if err != nil {
		fmt.Fprintln(stderr, "dlm demo:", err)
		return 1
	}
	m, err := dlm.New(single, dlm.WithTTL(*ttl), dlm.WithRetryDelay(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		fmt.Fprintln(stderr, "dlm demo:", err)
		return 2
	}

	fmt.Fprintf(stdout, "dlm demo: single-instance strategy over %s\n", where)
	fmt.Fprintf(stdout, "%d workers for %v, each holding %q for %v (TTL %v)\n\n", *workers, *duration, *key, *hold, *ttl)
	r := runWorkers(ctx, m, *key, *workers, *duration, *hold)
	return r.report(stdout)
}

// startEmbedded starts an in-process Redis whose keys expire in real time.
func startEmbedded() (addr string, stop func(), err error) {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		return "", nil, fmt.Errorf("start embedded Redis: %w", err)
	}
	// miniredis moves TTLs only when told to: tell it as time passes.
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				srv.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return srv.Addr(), func() { close(done); srv.Close() }, nil
}

type results struct {
	acquisitions  int64
	maxHolders    int32
	fenceBackward int64
	firstFence    uint64
	lastFence     uint64
	counter       int64
	waits         []time.Duration
	errs          []error
	lastErr       error
}

func runWorkers(ctx context.Context, m *dlm.Manager, key string, workers int, duration, hold time.Duration) *results {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var (
		r       results
		mu      sync.Mutex // guards r.waits, r.errs and the fence fields
		holders atomic.Int32
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var waits []time.Duration
			defer func() { mu.Lock(); r.waits = append(r.waits, waits...); mu.Unlock() }()
			for ctx.Err() == nil {
				start := time.Now()
				l, err := m.Lock(ctx, key)
				if err != nil {
					mu.Lock()
					if ctx.Err() == nil {
						r.errs = append(r.errs, err)
					} else {
						r.lastErr = err // the run ended; kept to explain zero acquisitions
					}
					mu.Unlock()
					return
				}
				waits = append(waits, time.Since(start))
				h := holders.Add(1)
				mu.Lock()
				r.maxHolders = max(r.maxHolders, h)
				if r.firstFence == 0 {
					r.firstFence = l.Fence()
				}
				if l.Fence() <= r.lastFence {
					r.fenceBackward++
				}
				r.lastFence = max(r.lastFence, l.Fence())
				r.acquisitions++
				mu.Unlock()
				// The shared resource: a read-modify-write that only the
				// lock keeps exact.
				v := atomic.LoadInt64(&r.counter)
				time.Sleep(hold)
				atomic.StoreInt64(&r.counter, v+1)
				holders.Add(-1)
				if err := l.Unlock(context.WithoutCancel(ctx)); err != nil {
					mu.Lock()
					r.errs = append(r.errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return &r
}

// report prints the results and returns the exit code: 0 when the lock held.
func (r *results) report(w io.Writer) int {
	slices.Sort(r.waits)
	pct := func(p float64) time.Duration {
		if len(r.waits) == 0 {
			return 0
		}
		return r.waits[int(p*float64(len(r.waits)-1))]
	}
	ok := r.acquisitions > 0 && r.maxHolders == 1 && r.fenceBackward == 0 && r.counter == r.acquisitions && len(r.errs) == 0
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	fmt.Fprintf(w, "acquisitions            %d\n", r.acquisitions)
	fmt.Fprintf(w, "most holders at once    %d (must be 1)\n", r.maxHolders)
	fmt.Fprintf(w, "fences                  %d..%d, strictly increasing: %s\n", r.firstFence, r.lastFence, yes(r.fenceBackward == 0))
	fmt.Fprintf(w, "shared counter          %d (must equal acquisitions: %s)\n", r.counter, yes(r.counter == r.acquisitions))
	fmt.Fprintf(w, "wait p50 / p99 / max    %v / %v / %v\n", round(pct(0.5)), round(pct(0.99)), round(pct(1)))
	if len(r.errs) == 0 && r.acquisitions == 0 && r.lastErr != nil {
		r.errs = append(r.errs, r.lastErr)
	}
	if len(r.errs) > 0 {
		fmt.Fprintf(w, "errors                  %d, first: %v\n", len(r.errs), r.errs[0])
	}
	if !ok {
		fmt.Fprintln(w, "\nFAILED: the lock did not hold")
		return 1
	}
	fmt.Fprintln(w, "\nOK: one holder at a time, every fence larger than the last")
	return 0
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
