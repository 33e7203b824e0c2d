package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/redis/go-redis/v9"

	"github.com/alicebob/miniredis/v2"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
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
doctor, for any strategy (servers named so are never stopped). --addr with
--strategy cluster names nodes of one Redis Cluster.

`

// demo runs dlm demo with args and returns its exit status.
// demoFallback is what the demo runs on when no deployment is named.
const demoFallback = "--addr, else five embedded in-process nodes"

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code := parseDemoFlags(args, stderr)
	if f == nil {
		return code
	}
	dial, err := f.target.dialer()
	if err != nil {
		return demoFail(stderr, usageError{err})
	}
	if *f.target.driver == "goredis" {
		dial = warmDial
	}
	setup, err := f.deployment()
	if err != nil {
		return demoFail(stderr, err)
	}
	defer setup.stopEmbedded()
	m, closer, err := setup.cfg.Open(ctx, dial, dlm.WithRetryDelay(retryDelays(setup.cfg.Strategy)))
	if err != nil {
		return demoFail(stderr, usageError{err})
	}
	defer closer.Close()

	fmt.Fprintln(stdout, setup.header)
	fmt.Fprintf(stdout, "%d workers for %v, each holding %q for %v (TTL %v)\n", f.workers, f.duration, f.key, f.hold, m.TTL())
	n := len(setup.cfg.Addrs)
	var stopped atomic.Bool
	stopMsg := func() string { return "" }
	if setup.toStop > 0 {
		fmt.Fprintf(stdout, "halfway through, %d of the %d nodes stop\n", setup.toStop, n)
		var cancel func()
		stopMsg, cancel = setup.stopHalfway(f.duration/2, &stopped)
		defer cancel()
	}
	fmt.Fprintln(stdout)
	r := runWorkers(ctx, m, f.key, f.workers, f.duration, f.hold, &stopped)
	if setup.toStop > 0 {
		r.stop = &stopReport{msg: stopMsg(), left: n - setup.toStop, quorum: n/2 + 1}
	}
	return r.report(stdout)
}

// demoFlags are dlm demo's flags.
type demoFlags struct {
	target                           targetFlags
	addr, strategy, key              string
	nodes, stop, workers             int
	nodeTimeout, duration, hold, ttl time.Duration
}

// parseDemoFlags returns the flags args set, or nil and the exit code for
// -h and for bad flags.
func parseDemoFlags(args []string, stderr io.Writer) (*demoFlags, int) {
	fs := flag.NewFlagSet("dlm demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage+targetUsage(demoFallback)+"\nflags:\n")
		fs.PrintDefaults()
	}
	f := &demoFlags{target: addTargetFlags(fs, demoFallback)}
	fs.StringVar(&f.addr, "addr", "", "Redis address host:port, or several separated by commas for Redlock (default: embedded in-process Redis nodes)")
	fs.StringVar(&f.strategy, "strategy", "", "single, redlock, or cluster (single on the Redis Cluster whose nodes --addr lists) (default: redlock, or single when --addr names one server)")
	fs.IntVar(&f.nodes, "nodes", 5, "embedded Redis nodes for Redlock")
	fs.IntVar(&f.stop, "stop", -1, "embedded nodes to stop halfway through (default: as many as the Redlock quorum survives)")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", 200*time.Millisecond, "Redlock's per-node timeout (with --url/--config: when the config sets no timeout)")
	fs.IntVar(&f.workers, "workers", 8, "concurrent workers")
	fs.DurationVar(&f.duration, "duration", 3*time.Second, "how long the workers run")
	fs.DurationVar(&f.hold, "hold", time.Millisecond, "how long each worker holds the lock")
	fs.DurationVar(&f.ttl, "ttl", 0, "lock TTL (default 1s on embedded nodes, 5s otherwise; with --url/--config: when the config sets no ttl)")
	fs.StringVar(&f.key, "key", "dlm-demo", "lock key")
	if err := fs.Parse(args); err != nil {
		return nil, parseExit(err)
	}
	ttlGiven := false
	fs.Visit(func(fl *flag.Flag) { ttlGiven = ttlGiven || fl.Name == "ttl" })
	switch {
	case f.workers < 1 || f.duration <= 0 || f.hold < 0 || ttlGiven && f.ttl <= 0:
		fmt.Fprintln(stderr, "dlm demo: --workers must be at least 1, --duration and --ttl positive, --hold not negative")
		return nil, 2
	case f.nodeTimeout <= 0:
		fmt.Fprintln(stderr, "dlm demo: --node-timeout must be positive")
		return nil, 2
	}
	return f, 0
}

// A usageError is a usage or configuration error: the demo exits 2.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// demoFail reports err and returns the exit code: 2 for a usageError, else 1.
func demoFail(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "dlm demo:", err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// A demoSetup is the deployment the demo runs on.
type demoSetup struct {
	cfg      config.Config
	header   string   // the report's first line
	stoppers []func() // stop each embedded node; nil for servers named by the user
	toStop   int      // embedded nodes to stop halfway through
}

// deployment returns the deployment the flags name: a configured one, else
// servers given by --addr, else embedded nodes it starts.
func (f *demoFlags) deployment() (*demoSetup, error) {
	if f.target.given() {
		return f.configured()
	}
	return f.byAddress()
}

// configured is the deployment --url, --config or DLM_URL names; its
// servers are never stopped.
func (f *demoFlags) configured() (*demoSetup, error) {
	if f.addr != "" || f.strategy != "" {
		return nil, usagef("--addr and --strategy cannot be combined with --url, --config or DLM_URL")
	}
	cfg, err := f.target.load()
	if err != nil {
		return nil, usageError{err}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = config.Duration(demoTimeout(cfg, f.nodeTimeout))
	}
	header := fmt.Sprintf("dlm demo: %s strategy, %s", cfg.Strategy, cfg)
	if cfg.Strategy == "redlock" {
		header += fmt.Sprintf(", quorum %d, per-node timeout %v", len(cfg.Addrs)/2+1, time.Duration(cfg.Timeout))
	}
	if cfg.TTL == 0 {
		cfg.TTL = config.Duration(cmp.Or(f.ttl, demoTTL))
	}
	return &demoSetup{cfg: cfg, header: header}, nil
}

// demoTimeout is the per-call timeout for a configured deployment that sets
// none: Redlock's per-node timeout, else a second more than the failover
// strategy's wait for replicas.
func demoTimeout(cfg config.Config, nodeTimeout time.Duration) time.Duration {
	switch {
	case cfg.Strategy == "redlock":
		return nodeTimeout
	case cfg.WaitTimeout > 0:
		return time.Duration(cfg.WaitTimeout) + time.Second
	}
	return time.Second + strategy.DefaultWaitTimeout
}

// byAddress is the deployment --addr, --strategy, --nodes and --stop
// describe: the servers --addr names, or embedded nodes started here.
func (f *demoFlags) byAddress() (*demoSetup, error) {
	var addrs []string
	if f.addr != "" {
		addrs = strings.Split(f.addr, ",")
	}
	strat, err := f.pickStrategy(len(addrs))
	if err != nil {
		return nil, err
	}
	n := len(addrs)
	if n == 0 {
		n = 1
		if strat == "redlock" {
			n = f.nodes
		}
	}
	if n < 1 {
		return nil, usagef("--nodes must be at least 1")
	}
	quorum := n/2 + 1
	s := &demoSetup{}
	if strat == "cluster" {
		s.header = "dlm demo: single-instance strategy over the Redis Cluster at " + f.addr
		s.cfg = config.Config{Strategy: "single", Cluster: true, Addrs: addrs, Timeout: config.Duration(time.Second), TTL: config.Duration(cmp.Or(f.ttl, demoTTL))}
		if err := s.cfg.Validate(); err != nil {
			return nil, usageError{err}
		}
		return s, nil
	}
	if len(addrs) == 0 && strat == "redlock" {
		s.toStop = n - quorum
		if f.stop >= 0 {
			s.toStop = f.stop
		}
		if s.toStop > n {
			return nil, usagef("--stop %d: there are only %d nodes", s.toStop, n)
		}
	}
	where, ttl := "Redis at "+f.addr, cmp.Or(f.ttl, demoTTL)
	if len(addrs) == 0 {
		if addrs, s.stoppers, err = startEmbeddedNodes(n); err != nil {
			return nil, err
		}
		where = fmt.Sprintf("%d embedded Redis node%s (miniredis, in-process)", n, map[bool]string{true: "", false: "s"}[n == 1])
		ttl = cmp.Or(f.ttl, embeddedTTL)
	}
	timeout := time.Second
	s.header = "dlm demo: single-instance strategy over " + where
	if strat == "redlock" {
		timeout = f.nodeTimeout
		s.header = fmt.Sprintf("dlm demo: Redlock strategy over %s, quorum %d, per-node timeout %v", where, quorum, f.nodeTimeout)
	}
	s.cfg = config.Config{Strategy: strat, Addrs: addrs, Timeout: config.Duration(timeout), TTL: config.Duration(ttl)}
	return s, nil
}

// pickStrategy returns the strategy --strategy names, or the default for
// the number of addresses --addr gives.
func (f *demoFlags) pickStrategy(addrs int) (string, error) {
	switch {
	case f.strategy == "" && addrs == 1:
		return "single", nil
	case f.strategy == "":
		return "redlock", nil
	case f.strategy == "cluster" && addrs == 0:
		return "", usagef("--strategy cluster needs --addr: some nodes of the Cluster")
	case f.strategy != "single" && f.strategy != "redlock" && f.strategy != "cluster":
		return "", usagef("--strategy %s: want single, redlock or cluster (or --url for failover)", quoteInput(f.strategy))
	case f.strategy == "single" && addrs > 1:
		return "", usagef("--strategy single takes one --addr")
	}
	return f.strategy, nil
}

// startEmbeddedNodes starts n embedded nodes; on error it stops those it
// started.
func startEmbeddedNodes(n int) (addrs []string, stoppers []func(), err error) {
	for range n {
		addr, stop, err := startEmbedded()
		if err != nil {
			for _, stop := range stoppers {
				stop()
			}
			return nil, nil, err
		}
		addrs, stoppers = append(addrs, addr), append(stoppers, stop)
	}
	return addrs, stoppers, nil
}

// stopEmbedded stops the embedded nodes that are still running.
func (s *demoSetup) stopEmbedded() {
	for _, stop := range s.stoppers {
		stop()
	}
}

// stopHalfway stops s.toStop embedded nodes after the given time and then
// sets stopped. report says which nodes stopped and when ("" before);
// cancel stops the timer.
func (s *demoSetup) stopHalfway(after time.Duration, stopped *atomic.Bool) (report func() string, cancel func()) {
	victims := pickVictims(len(s.stoppers), s.toStop)
	var (
		mu  sync.Mutex
		msg string
	)
	timer := time.AfterFunc(after, func() {
		var names []string
		for _, i := range victims {
			s.stoppers[i]()
			names = append(names, fmt.Sprintf("node %d (%s)", i+1, s.cfg.Addrs[i]))
		}
		mu.Lock()
		msg = fmt.Sprintf("at %v: %s", after.Round(time.Millisecond), strings.Join(names, ", "))
		mu.Unlock()
		stopped.Store(true)
	})
	report = func() string {
		mu.Lock()
		defer mu.Unlock()
		return msg
	}
	return report, func() { timer.Stop() }
}

// pickVictims returns which k of n nodes to stop: every other one, so that
// the survivors are not simply the first ones.
func pickVictims(n, k int) []int {
	var victims []int
	for i := 1; len(victims) < k; i = (i + 2) % (n + n%2 + 1) {
		if i < n && !slices.Contains(victims, i) {
			victims = append(victims, i)
		}
	}
	slices.Sort(victims)
	return victims
}

// retryDelays are the bounds of the Manager's retry delay. Redlock waiters
// retry sooner: a split vote costs more than a retry, and the Manager's
// jitter keeps contenders apart.
func retryDelays(strategy string) (min, max time.Duration) {
	if strategy == "redlock" {
		return time.Millisecond, 10 * time.Millisecond
	}
	return time.Millisecond, 20 * time.Millisecond
}

// warmDial is goredis.Dial that also opens a connection, best effort, so
// that the clock starts with connected clients.
func warmDial(ctx context.Context, ep config.Endpoint) (driver.Node, io.Closer, error) {
	n, c, err := goredis.Dial(ctx, ep)
	if client, ok := c.(redis.UniversalClient); ok && err == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = client.Ping(pctx).Err()
		cancel()
	}
	return n, c, err
}

// The demo's TTL unless --ttl or the configuration gives one: demoTTL on
// servers named by the user, embeddedTTL on embedded nodes, which is short
// because a node may run an acquisition after its caller gave up on it and
// the grant left there holds that node until the TTL ends: once two of five
// nodes stop every remaining node is needed, and a 5s TTL could stall the
// rest of a 5s run (seen under CI load).
const (
	demoTTL     = 5 * time.Second
	embeddedTTL = time.Second
)

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
	afterStop     int64       // acquisitions whose Lock call began after nodes stopped
	stop          *stopReport // nil when no node was stopped
}

type stopReport struct {
	msg          string
	left, quorum int
}

// runWorkers runs workers that lock key, hold it and unlock it until
// duration has passed, and collects what they saw. An acquisition counts as
// after the stop when its Lock call began once stopped was set.
//
// The workers stop when their context is canceled, not at a deadline: over
// rueidis and valkey-go, a call that outlives its deadline in flight closes
// the connection, and another worker's Unlock queued on it would fail.
func runWorkers(ctx context.Context, m *dlm.Manager, key string, workers int, duration, hold time.Duration, stopped *atomic.Bool) *results {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer time.AfterFunc(duration, cancel).Stop()
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
				start, afterStop := time.Now(), stopped.Load()
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
				if afterStop {
					r.afterStop++
				}
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
	held := r.maxHolders <= 1 && r.fenceBackward == 0 && r.counter == r.acquisitions
	ok := held && r.acquisitions > 0 && len(r.errs) == 0
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
	switch {
	case !held:
		fmt.Fprintln(w, "\nFAILED: the lock did not hold")
		return 1
	case !ok:
		// Exclusion and fences held; calls failed or none succeeded (on a
		// loaded machine, most often a node timing out a call).
		fmt.Fprintln(w, "\nFAILED: the lock held (one holder at a time, every fence larger than the last), but not every call succeeded")
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
