package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

const demoUsage = `usage: dlm demo [flags]

Runs concurrent workers that take one lock, touch a shared counter while
holding it, and release it; then reports what shows the lock held: most
holders at once (must be 1), fences strictly increasing, the counter equal to
the acquisitions, and wait times. Exit status 0 when the lock held, 1 when
it did not, 2 on usage or configuration errors.

By default it runs Redlock over five embedded in-process Redis nodes
(miniredis) and stops two of them halfway. --addr names real servers;
--url, --config or DLM_URL take the same configuration as dlm run and dlm
doctor, for any strategy (servers named so are never stopped).

`

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, demoUsage+targetUsage+"\nflags:\n"); fs.PrintDefaults() }
	tf := addTargetFlags(fs)
	addr := fs.String("addr", "", "Redis address host:port, or several separated by commas for Redlock (default: embedded in-process Redis nodes)")
	strat := fs.String("strategy", "", "single or redlock (default: redlock, or single when --addr names one server)")
	nodes := fs.Int("nodes", 5, "embedded Redis nodes for Redlock")
	stop := fs.Int("stop", -1, "embedded nodes to stop halfway through (default: as many as the Redlock quorum survives)")
	nodeTimeout := fs.Duration("node-timeout", 200*time.Millisecond, "Redlock's per-node timeout (with --url/--config: when the config sets no timeout)")
	workers := fs.Int("workers", 8, "concurrent workers")
	duration := fs.Duration("duration", 3*time.Second, "how long the workers run")
	hold := fs.Duration("hold", time.Millisecond, "how long each worker holds the lock")
	ttl := fs.Duration("ttl", 5*time.Second, "lock TTL (with --url/--config: when the config sets no ttl)")
	key := fs.String("key", "dlm-demo", "lock key")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *workers < 1 || *duration <= 0 || *hold < 0 {
		fmt.Fprintln(stderr, "dlm demo: --workers must be at least 1, --duration positive, --hold not negative")
		return 2
	}
	if *nodeTimeout <= 0 {
		fmt.Fprintln(stderr, "dlm demo: --node-timeout must be positive")
		return 2
	}
	var (
		s         dlm.Strategy
		header    string
		stoppers  []func()
		addrs     []string
		n, quorum int
		toStop    int
	)
	if *tf.url != "" || *tf.config != "" || os.Getenv("DLM_URL") != "" {
		if *addr != "" || *strat != "" {
			fmt.Fprintln(stderr, "dlm demo: --addr and --strategy cannot be combined with --url, --config or DLM_URL")
			return 2
		}
		cfg, err := tf.load()
		if err != nil {
			fmt.Fprintln(stderr, "dlm demo:", err)
			return 2
		}
		if cfg.TTL > 0 {
			*ttl = time.Duration(cfg.TTL)
		}
		if cfg.Timeout == 0 {
			switch {
			case cfg.Strategy == "redlock":
				cfg.Timeout = strategy.Duration(*nodeTimeout)
			case cfg.WaitTimeout > 0:
				cfg.Timeout = cfg.WaitTimeout + strategy.Duration(time.Second)
			default:
				cfg.Timeout = strategy.Duration(time.Second + strategy.DefaultWaitTimeout)
			}
		}
		t, err := connect(cfg)
		if err != nil {
			fmt.Fprintln(stderr, "dlm demo:", err)
			return 2
		}
		defer t.Close()
		for _, c := range t.clients {
			// Best effort: open a connection before the clock starts.
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = c.Ping(pctx).Err()
			cancel()
		}
		s, *strat = t.strat, cfg.Strategy
		header = fmt.Sprintf("dlm demo: %s strategy, %s", cfg.Strategy, cfg)
		if rl, ok := s.(*strategy.Redlock); ok {
			header += fmt.Sprintf(", quorum %d, per-node timeout %v", rl.Quorum(), rl.Timeout())
		}
	} else {
		if *addr != "" {
			addrs = strings.Split(*addr, ",")
		}
		switch {
		case *strat == "" && len(addrs) == 1:
			*strat = "single"
		case *strat == "":
			*strat = "redlock"
		case *strat != "single" && *strat != "redlock":
			fmt.Fprintf(stderr, "dlm demo: --strategy %q: want single or redlock (or --url for failover)\n", *strat)
			return 2
		}
		if *strat == "single" && len(addrs) > 1 {
			fmt.Fprintln(stderr, "dlm demo: --strategy single takes one --addr")
			return 2
		}
		n = len(addrs)
		if n == 0 {
			n = 1
			if *strat == "redlock" {
				n = *nodes
			}
		}
		if n < 1 {
			fmt.Fprintln(stderr, "dlm demo: --nodes must be at least 1")
			return 2
		}
		quorum = n/2 + 1
		if len(addrs) == 0 && *strat == "redlock" {
			toStop = n - quorum
			if *stop >= 0 {
				toStop = *stop
			}
			if toStop > n {
				fmt.Fprintf(stderr, "dlm demo: --stop %d: there are only %d nodes\n", toStop, n)
				return 2
			}
		}

		where := "Redis at " + *addr
		if len(addrs) == 0 {
			for range n {
				srv, stopSrv, err := startEmbedded()
				if err != nil {
					fmt.Fprintln(stderr, "dlm demo:", err)
					return 1
				}
				defer stopSrv()
				addrs = append(addrs, srv)
				stoppers = append(stoppers, stopSrv)
			}
			where = fmt.Sprintf("%d embedded Redis node%s (miniredis, in-process)", n, map[bool]string{true: "", false: "s"}[n == 1])
		}
		var dnodes []dlm.Node
		for _, a := range addrs {
			// One round trip per call: no client-side retries, and a stopped
			// node fails at once rather than after go-redis' five redials
			// 100ms apart.
			client := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
			defer client.Close()
			dnodes = append(dnodes, goredis.New(client))
			// Best effort: open a connection before the clock starts.
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = client.Ping(pctx).Err()
			cancel()
		}
		var err error
		if *strat == "single" {
			s, err = strategy.NewSingle(dnodes[0], strategy.WithTimeout(time.Second))
			header = "dlm demo: single-instance strategy over " + where
		} else {
			s, err = strategy.NewRedlock(dnodes, strategy.WithTimeout(*nodeTimeout))
			header = fmt.Sprintf("dlm demo: Redlock strategy over %s, quorum %d, per-node timeout %v", where, quorum, *nodeTimeout)
		}
		if err != nil {
			fmt.Fprintln(stderr, "dlm demo:", err)
			return 1
		}
	}
	// Redlock waiters retry sooner: a split vote costs more than a retry,
	// and the Manager's jitter keeps contenders apart.
	retryMin, retryMax := time.Millisecond, 20*time.Millisecond
	if *strat == "redlock" {
		retryMin, retryMax = time.Millisecond, 10*time.Millisecond
	}
	var stopped atomic.Bool
	counted := &countingStrategy{Strategy: s, stopped: &stopped}
	m, err := dlm.New(counted, dlm.WithTTL(*ttl), dlm.WithRetryDelay(retryMin, retryMax))
	if err != nil {
		fmt.Fprintln(stderr, "dlm demo:", err)
		return 2
	}

	fmt.Fprintln(stdout, header)
	fmt.Fprintf(stdout, "%d workers for %v, each holding %q for %v (TTL %v)\n", *workers, *duration, *key, *hold, *ttl)
	var (
		stopMu  sync.Mutex
		stopMsg string
	)
	if toStop > 0 {
		fmt.Fprintf(stdout, "halfway through, %d of the %d nodes stop\n", toStop, n)
		// Stop every other node, so the survivors are not simply the first ones.
		var victims []int
		for i := 1; len(victims) < toStop; i = (i + 2) % (n + n%2 + 1) {
			if i < n && !slices.Contains(victims, i) {
				victims = append(victims, i)
			}
		}
		slices.Sort(victims)
		timer := time.AfterFunc(*duration/2, func() {
			var names []string
			for _, i := range victims {
				stoppers[i]()
				names = append(names, fmt.Sprintf("node %d (%s)", i+1, addrs[i]))
			}
			stopMu.Lock()
			stopMsg = fmt.Sprintf("at %v: %s", (*duration / 2).Round(time.Millisecond), strings.Join(names, ", "))
			stopMu.Unlock()
			stopped.Store(true)
		})
		defer timer.Stop()
	}
	fmt.Fprintln(stdout)
	r := runWorkers(ctx, m, *key, *workers, *duration, *hold)
	r.afterStop = counted.afterStop.Load()
	if toStop > 0 {
		stopMu.Lock()
		r.stop = &stopReport{msg: stopMsg, left: n - toStop, quorum: quorum}
		stopMu.Unlock()
	}
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
	var once sync.Once
	return srv.Addr(), func() { once.Do(func() { close(done); srv.Close() }) }, nil
}

// countingStrategy counts the acquisitions whose attempt began after the
// nodes stopped: those were granted by the remaining nodes alone.
type countingStrategy struct {
	dlm.Strategy
	stopped   *atomic.Bool
	afterStop atomic.Int64
}

func (c *countingStrategy) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	began := c.stopped.Load()
	l, err := c.Strategy.Acquire(ctx, key, token, ttl)
	if err == nil && began {
		c.afterStop.Add(1)
	}
	return l, err
}

// quietLogger drops go-redis' log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

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
	afterStop     int64       // acquisitions whose attempt began after nodes stopped
	stop          *stopReport // nil when no node was stopped
}

type stopReport struct {
	msg          string
	left, quorum int
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
	if r.stop != nil && r.afterStop == 0 {
		ok = false
	}
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
	if r.stop != nil {
		msg := r.stop.msg
		if msg == "" {
			msg = "none: the run ended first"
		}
		fmt.Fprintf(w, "nodes stopped           %s\n", msg)
		switch {
		case r.afterStop > 0:
			fmt.Fprintf(w, "acquisitions after      %d: the lock kept working on the %d remaining nodes (quorum %d)\n", r.afterStop, r.stop.left, r.stop.quorum)
		case r.stop.left < r.stop.quorum:
			fmt.Fprintf(w, "acquisitions after      0: the %d remaining nodes are fewer than the quorum of %d, so no one may lock\n", r.stop.left, r.stop.quorum)
		default:
			fmt.Fprintf(w, "acquisitions after      0 (must be more)\n")
		}
	}
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
