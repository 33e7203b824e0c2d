package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config holds the sizes of the run. fullConfig and smokeConfig are the two
// presets; flags override single fields.
type Config struct {
	Reps int // repetitions; every figure is the median over them

	TTL         time.Duration // lease of every lock (except the renewal scenario's)
	NodeTimeout time.Duration // bound on one call to one node
	// Bounded bounds every call of every contender by NodeTimeout: dlm's
	// single-instance strategy gets WithTimeout(NodeTimeout) and
	// bsm/redislock a context of NodeTimeout per call, as the others have
	// (Redlock's per-node timeout, redsync's timeout factor, redigo's
	// socket timeouts, rueidislock's TryNextAfter). -bounded sets it.
	Bounded    bool          `json:",omitempty"`
	RetryMin   time.Duration // retry budget of Lock, the same for every contender that polls
	RetryMax   time.Duration
	WaitBudget time.Duration // longest a Lock call may wait
	OpTimeout  time.Duration // the caller's deadline on each call in the silent-node scenario
	PoolSize   int

	// SerialOps is how many pairs each serial contender makes in a
	// repetition. Its p99 is set by its SerialOps/100 slowest pairs, whose
	// latency is mostly the machine's (a timer, the hypervisor): with 2,000
	// pairs one contender's p99 over another's moved between 0.86x and
	// 1.25x from one repetition to the next, whoever the contenders were.
	SerialOps      int
	DistinctG      int
	DistinctDur    time.Duration
	ContendedG     int
	ContendedHold  time.Duration
	ContendedDur   time.Duration
	HandoffRounds  int
	HandoffWaiters int
	HandoffHoldMin time.Duration // a round's holder keeps the lock a random time in [min, max]
	HandoffHoldMax time.Duration
	SilentOps      int
	SilentReps     int // the silent-node scenario costs ~OpTimeout per op, so it has its own count
	RenewLocks     int
	RenewReps      int // the renewal scenario takes seconds per contender, so it has its own count
	RenewTTL       time.Duration
	RenewWindow    time.Duration
	Warmup         int // lock+unlock pairs before each measurement
	// StealRedo is how many times a repetition of a scenario that reports
	// each contender's steal time is run again while that lies more than
	// stealSpreadMax points apart.
	StealRedo int
}

func fullConfig() Config {
	return Config{
		Reps: 5, TTL: 10 * time.Second, NodeTimeout: 100 * time.Millisecond,
		RetryMin: 5 * time.Millisecond, RetryMax: 250 * time.Millisecond,
		WaitBudget: 10 * time.Second, OpTimeout: 500 * time.Millisecond, PoolSize: 128,
		SerialOps: 6000, DistinctG: 64, DistinctDur: time.Second,
		ContendedG: 16, ContendedHold: time.Millisecond, ContendedDur: 2 * time.Second,
		HandoffRounds: 30, HandoffWaiters: 4, HandoffHoldMin: 20 * time.Millisecond, HandoffHoldMax: 80 * time.Millisecond,
		SilentOps: 12, SilentReps: 3,
		RenewLocks: 10000, RenewReps: 3, RenewTTL: 2 * time.Second, RenewWindow: 4 * time.Second,
		Warmup: 50, StealRedo: 2,
	}
}

func smokeConfig() Config {
	c := fullConfig()
	c.Reps, c.SerialOps, c.Warmup = 1, 20, 3
	c.DistinctG, c.DistinctDur = 8, 100*time.Millisecond
	c.ContendedG, c.ContendedDur = 4, 200*time.Millisecond
	c.HandoffRounds, c.HandoffWaiters = 2, 2
	c.HandoffHoldMin, c.HandoffHoldMax = 5*time.Millisecond, 10*time.Millisecond
	// A per-node timeout that load alone does not reach: in the smoke run a
	// failed dlm call is a bug (TestSmoke fails on it).
	c.NodeTimeout = 300 * time.Millisecond
	c.SilentOps, c.SilentReps, c.OpTimeout = 2, 1, 600*time.Millisecond
	c.RenewLocks, c.RenewReps, c.RenewTTL, c.RenewWindow = 50, 1, 600*time.Millisecond, 1200*time.Millisecond
	return c
}

// A Metric is one figure a scenario reports.
type Metric struct {
	Key    string `json:"key"`
	Label  string `json:"label"`
	Unit   string `json:"unit"`
	Higher bool   `json:"higher_is_better"`
	Chart  bool   `json:"-"` // drawn in the chart
	// Reference marks a figure measured beside the contender rather than
	// of it (a PING's round trip): shown without a ratio or an arrow.
	Reference bool `json:"reference,omitempty"`
	// Optional marks a figure added after runs that are committed: a
	// results file without it renders without its column.
	Optional bool `json:"-"`
}

// A Scenario measures one Locker once (one repetition).
type Scenario struct {
	Name    string
	Title   string
	Metrics []Metric
	Reps    func(Config) int
	Applies func(c Contender, top Topology) bool
	// Est is a rough duration of one repetition for c on a 2-core machine,
	// for the estimate printed at the start.
	Est func(cfg Config, c Contender) time.Duration
	Run func(ctx context.Context, r *runner, c *entry, rep int) (map[string]float64, error)
	// RunAll, when set instead of Run, measures every contender of a
	// repetition in one call, in the order given (rotated by one each
	// repetition), and returns their figures and errors in that order.
	RunAll func(ctx context.Context, r *runner, in []*entry, rep int) ([]map[string]float64, []error)
	Rounds func(Config) int // turns each contender takes in a repetition of RunAll
	// OneCPU runs the repetitions with this process and every server on
	// one CPU (Topology.Pin).
	OneCPU bool
}

// entry is a contender with its Locker, built once for the run.
type entry struct {
	Contender
	idx    int
	env    Env
	locker Locker
}

// key names a lock; every contender uses the same pattern in its own namespace.
func (e *entry) key(scenario string, parts ...any) string {
	k := fmt.Sprintf("bench:c%d:%s", e.idx, scenario)
	for _, p := range parts {
		k += fmt.Sprintf(":%v", p)
	}
	return k
}

func always(Contender, Topology) bool { return true }

var scenarios = []Scenario{
	{
		Name: "serial", Title: "Serial lock+unlock, uncontended (one goroutine, one key)",
		Metrics: []Metric{
			{Key: "p50_us", Label: "p50", Unit: "µs", Chart: true},
			{Key: "p99_us", Label: "p99", Unit: "µs"},
			{Key: "allocs_op", Label: "allocs/op", Unit: ""},
			{Key: "bytes_op", Label: "B/op", Unit: ""},
			{Key: "failed", Label: "failed", Unit: ""},
		},
		Applies: always, RunAll: runSerial, Rounds: func(Config) int { return serialRounds }, OneCPU: true,
		Est: func(cfg Config, c Contender) time.Duration {
			return time.Duration(cfg.Warmup+cfg.SerialOps) * pairCost(c)
		},
	},
	{
		Name: "distinct", Title: "Parallel lock+unlock on distinct keys",
		Metrics: []Metric{
			{Key: "ops_s", Label: "ops/s", Unit: "", Higher: true, Chart: true},
			{Key: "client_us_op", Label: "client CPU/op", Unit: "µs"},
			{Key: "server_us_op", Label: "server CPU/op", Unit: "µs"},
			{Key: "server_cmds_op", Label: "server cmds/op (incl. in scripts)", Unit: ""},
			{Key: "failed", Label: "failed calls", Unit: ""},
			{Key: "failed_per_100k", Label: "failed pairs per 100k", Unit: "", Optional: true},
			// The share of the machine's CPU time that the hypervisor gave
			// other guests during this contender's loop: a repetition's
			// ratio is fair only where its contenders' steal was alike.
			{Key: "steal_pct", Label: "steal", Unit: "%", Reference: true},
		},
		Applies: always, RunAll: runDistinct, Rounds: func(Config) int { return distinctRounds },
		Est: func(cfg Config, c Contender) time.Duration {
			return warmCost(cfg, c) + time.Duration(cfg.DistinctG*warmAllPairs)*pairCost(c)/2 + cfg.DistinctDur
		},
	},
	{
		Name: "contended", Title: "Goroutines on one key, each holding it 1ms",
		Metrics: []Metric{
			{Key: "ops_s", Label: "acquisitions/s", Unit: "", Higher: true, Chart: true},
			{Key: "wait_p50_ms", Label: "wait p50", Unit: "ms"},
			{Key: "wait_p99_ms", Label: "wait p99", Unit: "ms"},
			{Key: "spread_cv", Label: "spread (CV)", Unit: ""},
			{Key: "failed", Label: "failed calls", Unit: ""},
		},
		Applies: always, Run: runContended,
		Est: func(cfg Config, c Contender) time.Duration { return warmCost(cfg, c) + cfg.ContendedDur },
	},
	{
		Name: "handoff", Title: "Hand-off: release to the first blocked waiter's acquisition",
		Metrics: []Metric{
			{Key: "p50_ms", Label: "p50", Unit: "ms", Chart: true},
			{Key: "p90_ms", Label: "p90", Unit: "ms"},
			{Key: "rtt_p50_ms", Label: "PING p50", Unit: "ms", Reference: true},
			{Key: "failed", Label: "failed rounds", Unit: ""},
		},
		Applies: always, RunAll: runHandoff, Rounds: func(c Config) int { return c.HandoffRounds },
		Est: func(cfg Config, c Contender) time.Duration {
			return warmCost(cfg, c) + time.Duration(cfg.HandoffRounds)*((cfg.HandoffHoldMin+cfg.HandoffHoldMax)+5*time.Millisecond)
		},
	},
	{
		Name: "silent", Title: "One of five nodes silent (SIGSTOP): serial lock, then unlock",
		Metrics: []Metric{
			{Key: "lock_p50_ms", Label: "lock p50", Unit: "ms"},
			{Key: "lock_p99_ms", Label: "lock p99", Unit: "ms", Chart: true},
			{Key: "unlock_p99_ms", Label: "unlock p99", Unit: "ms"},
			{Key: "failed", Label: "failed locks", Unit: ""},
		},
		Reps:    func(c Config) int { return c.SilentReps },
		Applies: func(c Contender, top Topology) bool { return c.Nodes == 5 && top.Freeze != nil },
		Run:     runSilent,
		Est: func(cfg Config, c Contender) time.Duration {
			return warmCost(cfg, c) + time.Duration(cfg.SilentOps)*2*cfg.NodeTimeout // a library that waits for the silent node
		},
	},
	{
		Name: "renewal", Title: "Renewal cost: locks held and renewed by the library (server figures summed over the nodes)",
		Metrics: []Metric{
			{Key: "client_cpu", Label: "client CPU", Unit: "ms/s", Chart: true},
			{Key: "server_cpu", Label: "server CPU", Unit: "ms/s"},
			{Key: "server_cmds", Label: "server cmds/s (incl. in scripts)", Unit: ""},
			{Key: "heap_per_lock", Label: "heap/lock", Unit: "B"},
			{Key: "goroutines_per_lock", Label: "goroutines/lock", Unit: ""},
			{Key: "lost", Label: "lost", Unit: ""},
		},
		Reps:    func(c Config) int { return c.RenewReps },
		Applies: func(c Contender, _ Topology) bool { return c.Renews },
		Run:     runRenewal,
		Est: func(cfg Config, c Contender) time.Duration {
			// warm-up, then take and release every lock from 32 goroutines
			// (about two pairs at a time on two cores), then the window
			return warmCost(cfg, c) + time.Duration(cfg.RenewLocks)*pairCost(c)/2 + cfg.RenewWindow
		},
	},
}

// warmAllPairs is how many pairs each goroutine of warmAll runs.
const warmAllPairs = 3

// pairCost is a rough duration of one lock+unlock pair on a 2-core machine.
func pairCost(c Contender) time.Duration {
	return time.Duration(c.Nodes) * 150 * time.Microsecond
}

// warmCost is a rough duration of warm.
func warmCost(cfg Config, c Contender) time.Duration {
	return time.Duration(cfg.Warmup) * pairCost(c)
}

// warm runs lock+unlock pairs so pools are filled and scripts cached. It
// fails only when most pairs fail.
func warm(ctx context.Context, r *runner, c *entry, key string) error {
	return warmN(ctx, c, key, r.cfg.Warmup)
}

// warmN is warm with n pairs.
func warmN(ctx context.Context, c *entry, key string, n int) error {
	failed := 0
	var first error
	for range n {
		h, err := c.locker.TryLock(ctx, key)
		if err == nil {
			err = unlock(ctx, h)
		}
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > n/2 {
		return fmt.Errorf("warm-up: %d of %d pairs failed, first: %w", failed, n, first)
	}
	return nil
}

// warmAll runs warm on one key, then warmAllPairs pairs from each of n
// goroutines at once, goroutine g on key(g), so the clients hold the
// connections a measurement with n goroutines needs before it starts,
// instead of dialing them all in its first milliseconds. It fails when the
// first warm-up or more than half of the goroutines' fail.
func warmAll(ctx context.Context, r *runner, c *entry, n int, key func(g int) string) error {
	if err := warm(ctx, r, c, key(0)); err != nil {
		return err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() { errs[g] = warmN(ctx, c, key(g), warmAllPairs) })
	}
	wg.Wait()
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if failed > n/2 {
		return fmt.Errorf("%d of %d goroutines, first: %w", failed, n, first)
	}
	return nil
}

// serialRounds is how many turns each contender of the serial scenario
// takes in a repetition.
const serialRounds = 20

// runSerial measures the serial pairs of every contender of a repetition,
// interleaved: in serialRounds rounds, each contender in turn makes its
// share of SerialOps pairs. A pair takes tens of microseconds, so a change
// in the machine's speed during the repetition (a neighbour on the host,
// the scheduler) would otherwise fall on one contender's block of pairs
// and make a ratio of it; interleaved, it falls on all alike.
func runSerial(ctx context.Context, r *runner, in []*entry, rep int) ([]map[string]float64, []error) {
	type tally struct {
		lat            []time.Duration
		mallocs, bytes uint64
		failed         int
		first          error
	}
	ts := make([]tally, len(in))
	errs := make([]error, len(in))
	for j, c := range in {
		errs[j] = warm(ctx, r, c, c.key("serial"))
		ts[j].lat = make([]time.Duration, 0, r.cfg.SerialOps)
	}
	chunk := max(1, r.cfg.SerialOps/serialRounds)
	var m0, m1 runtime.MemStats
	for done := 0; done < r.cfg.SerialOps && ctx.Err() == nil; done += chunk {
		for j, c := range in {
			if errs[j] != nil {
				continue
			}
			t, key := &ts[j], c.key("serial")
			runtime.ReadMemStats(&m0)
			for range min(chunk, r.cfg.SerialOps-done) {
				start := time.Now()
				h, err := c.locker.TryLock(ctx, key)
				if err == nil {
					err = unlock(ctx, h)
				}
				t.lat = append(t.lat, time.Since(start)) // a failed pair still took the caller this long
				if err != nil {
					t.failed++
					t.first = cmp.Or(t.first, err)
				}
			}
			runtime.ReadMemStats(&m1)
			t.mallocs += m1.Mallocs - m0.Mallocs
			t.bytes += m1.TotalAlloc - m0.TotalAlloc
		}
	}
	out := make([]map[string]float64, len(in))
	for j := range in {
		t := &ts[j]
		switch {
		case errs[j] != nil:
			continue
		case len(t.lat) == 0:
			errs[j] = cmp.Or(ctx.Err(), errors.New("no pair made"))
			continue
		case t.failed > len(t.lat)/10:
			errs[j] = fmt.Errorf("%d of %d pairs failed, first: %w", t.failed, len(t.lat), t.first)
			continue
		}
		n := float64(len(t.lat))
		out[j] = map[string]float64{
			"failed":    float64(t.failed),
			"p50_us":    us(pct(t.lat, 50)),
			"p99_us":    us(pct(t.lat, 99)),
			"allocs_op": float64(t.mallocs) / n,
			"bytes_op":  float64(t.bytes) / n,
		}
	}
	return out, errs
}

// distinctRounds is how many turns each contender of the distinct scenario
// takes in a repetition, DistinctDur in all.
const distinctRounds = 5

// runDistinct measures every contender of a repetition in distinctRounds
// rounds: in each, every contender in turn runs DistinctG goroutines on
// keys of their own for its share of DistinctDur. The throughput of this
// machine drifts by a tenth and more over seconds (its hypervisor's other
// guests): interleaved, a drift falls on every contender alike instead of
// on one's turn, and makes no ratio.
func runDistinct(ctx context.Context, r *runner, in []*entry, rep int) ([]map[string]float64, []error) {
	ts := make([]distinctTally, len(in))
	errs := make([]error, len(in))
	for j, c := range in {
		errs[j] = warmAll(ctx, r, c, r.cfg.DistinctG, func(g int) string { return c.key("distinct", g) })
	}
	turn := r.cfg.DistinctDur / distinctRounds
	for range distinctRounds {
		for j, c := range in {
			if errs[j] == nil && ctx.Err() == nil {
				errs[j] = ts[j].turn(ctx, r, c, turn)
			}
		}
	}
	out := make([]map[string]float64, len(in))
	for j := range in {
		if errs[j] == nil {
			out[j], errs[j] = ts[j].vals()
		}
	}
	return out, errs
}

// distinctTally sums one contender's turns of the distinct scenario.
type distinctTally struct {
	ops, failed int64
	first       error
	took, cpu   time.Duration
	server      serverStats // the servers' CPU and commands during the turns
	infos       int64       // INFO calls among server.Calls
	cpuTime     cpuTimes    // the machine's, during the turns
	timed       bool        // cpuTime was read (/proc/stat)
}

// turn runs the contender's goroutines for d, and adds what they did.
func (t *distinctTally) turn(ctx context.Context, r *runner, c *entry, d time.Duration) error {
	// A call that fails (a node timing out on a loaded machine) is counted
	// and the loop goes on; the measurement fails only when most calls do.
	var ops, failed atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) {
		failed.Add(1)
		once.Do(func() { firstErr = err })
	}
	s0, err := readAllStats(ctx, c.env.Addrs)
	if err != nil {
		return err
	}
	cpu0, times0 := cpuTime(), readCPUTimes()
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for g := range r.cfg.DistinctG {
		key := c.key("distinct", g)
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				h, err := c.locker.TryLock(ctx, key)
				if err != nil {
					fail(fmt.Errorf("lock: %w", err))
					continue
				}
				if err := h.Unlock(ctx); err != nil {
					fail(fmt.Errorf("unlock: %w", err))
					continue
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	took, cpu, times1 := time.Since(start), cpuTime()-cpu0, readCPUTimes()
	s1, err := readAllStats(ctx, c.env.Addrs)
	if err != nil {
		return err
	}
	t.ops += ops.Load()
	t.failed += failed.Load()
	t.first = cmp.Or(t.first, firstErr)
	t.took += took
	t.cpu += cpu
	t.server.CPU += s1.CPU - s0.CPU
	t.server.Calls += s1.Calls - s0.Calls
	t.infos += int64(len(c.env.Addrs)) // s0's
	if d, ok := times1.since(times0); ok {
		t.cpuTime.total += d.total
		t.cpuTime.steal += d.steal
		t.timed = true
	}
	return nil
}

// vals returns the scenario's figures from the turns summed.
func (t *distinctTally) vals() (map[string]float64, error) {
	if t.failed > t.ops {
		return nil, fmt.Errorf("%d of %d calls failed, first: %w", t.failed, t.failed+t.ops, t.first)
	}
	n := float64(max(t.ops, 1))
	vals := map[string]float64{
		"ops_s": float64(t.ops) / t.took.Seconds(),
		// This process's CPU per pair: the contender's client and library.
		"client_us_op": float64(t.cpu.Nanoseconds()) / 1e3 / n,
		// Server CPU per lock+unlock pair, summed over the nodes, from the
		// servers' own counters (used_cpu_sys + used_cpu_user); a library
		// that renews in the background would count that too.
		"server_us_op":   t.server.CPU * 1e6 / n,
		"server_cmds_op": float64(t.server.Calls-t.infos) / n,
		"failed":         float64(t.failed),
		// A pair fails at its first failed call (the loop then goes on).
		"failed_per_100k": 1e5 * float64(t.failed) / float64(max(t.ops+t.failed, 1)),
	}
	if t.timed {
		vals["steal_pct"] = t.cpuTime.stealPct()
	}
	return vals, nil
}

func runContended(ctx context.Context, r *runner, c *entry, rep int) (map[string]float64, error) {
	key := c.key("contended")
	if err := warmAll(ctx, r, c, r.cfg.ContendedG, func(g int) string { return c.key("contended", "warm", g) }); err != nil {
		return nil, err
	}
	start := time.Now()
	end := start.Add(r.cfg.ContendedDur)
	// The waits still pending at the end are canceled then, not cut by a
	// deadline: over rueidis and valkey-go a call in flight at its deadline
	// closes the connection and fails another goroutine's Unlock behind it
	// (docs/drivers.md, "Another call's deadline").
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer time.AfterFunc(time.Until(end), cancel).Stop()
	var holders, violations atomic.Int32
	var failed atomic.Int64
	counts := make([]int, r.cfg.ContendedG)
	waits := make([][]time.Duration, r.cfg.ContendedG)
	errs := make([]error, r.cfg.ContendedG)
	var wg sync.WaitGroup
	for g := range r.cfg.ContendedG {
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				h, err := c.locker.Lock(lctx, key)
				waits[g] = append(waits[g], time.Since(t0)) // a wait cut off at the end counts as its length so far
				if err != nil {
					if lctx.Err() != nil {
						return
					}
					// A library may give up on a node error (bsm/redislock does);
					// count it and wait again, as a caller would.
					if failed.Add(1) == 1 {
						errs[g] = fmt.Errorf("lock: %w", err)
					}
					continue
				}
				counts[g]++
				if holders.Add(1) != 1 {
					violations.Add(1)
				}
				time.Sleep(r.cfg.ContendedHold)
				holders.Add(-1)
				if err := unlock(ctx, h); err != nil {
					if failed.Add(1) == 1 {
						errs[g] = fmt.Errorf("unlock: %w", err)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if v := violations.Load(); v > 0 {
		return nil, fmt.Errorf("mutual exclusion violated %d times", v)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if int64(total) < failed.Load() || total == 0 {
		return nil, fmt.Errorf("%d acquisitions, %d failed calls: %w", total, failed.Load(), errors.Join(errs...))
	}
	all := slices.Concat(waits...)
	return map[string]float64{
		"ops_s":       float64(total) / elapsed.Seconds(),
		"wait_p50_ms": ms(pct(all, 50)),
		"wait_p99_ms": ms(pct(all, 99)),
		"spread_cv":   cv(counts),
		"failed":      float64(failed.Load()),
	}, nil
}

// runHandoff measures every contender of a repetition in HandoffRounds
// rounds: in each, every contender in turn hands its lock off once, so
// that a drift of the machine's speed falls on all alike (as in
// runDistinct).
func runHandoff(ctx context.Context, r *runner, in []*entry, rep int) ([]map[string]float64, []error) {
	ts := make([]handoffTally, len(in))
	errs := make([]error, len(in))
	for j, c := range in {
		errs[j] = ts[j].start(ctx, r, c)
		defer ts[j].close()
	}
	for range r.cfg.HandoffRounds {
		for j, c := range in {
			if errs[j] == nil && ctx.Err() == nil {
				errs[j] = ts[j].round(ctx, r, c)
			}
		}
	}
	out := make([]map[string]float64, len(in))
	for j := range in {
		if errs[j] == nil {
			out[j], errs[j] = ts[j].vals(r.cfg.HandoffRounds)
		}
	}
	return out, errs
}

// handoffTally is one contender's hand-off rounds.
type handoffTally struct {
	key            string
	ping           *pinger // nil: the contender has no server address (a test's)
	samples, pings []time.Duration
	failedRounds   int
	firstErr       error
}

// start warms the contender up and dials its PING connection.
func (t *handoffTally) start(ctx context.Context, r *runner, c *entry) error {
	t.key = c.key("handoff")
	if err := warm(ctx, r, c, t.key); err != nil {
		return err
	}
	if len(c.env.Addrs) > 0 {
		var err error
		if t.ping, err = dialPing(c.env.Addrs[0]); err != nil {
			return err
		}
	}
	return nil
}

func (t *handoffTally) close() {
	if t.ping != nil {
		t.ping.Close()
	}
}

// round is one hand-off: a holder keeps the key while HandoffWaiters wait
// in Lock, then releases it; the sample is the time from the release to
// the first waiter's acquisition. An error ends the contender's
// measurement (two waiters holding the lock at once, a failed unlock); a
// failed acquisition only fails the round.
func (t *handoffTally) round(ctx context.Context, r *runner, c *entry) error {
	type got struct {
		h   Held
		at  time.Time
		err error
	}
	if t.ping != nil {
		// The reference: one round trip to the contender's (first)
		// server after as long an idle as the hand-off's, over the
		// same path.
		time.Sleep(r.cfg.HandoffHoldMin + rand.N(r.cfg.HandoffHoldMax-r.cfg.HandoffHoldMin+1))
		d, err := t.ping.roundTrip()
		if err != nil {
			return err
		}
		t.pings = append(t.pings, d)
	}
	holder, err := c.locker.TryLock(ctx, t.key)
	if err != nil && !errors.Is(err, errBusy) {
		t.failedRounds++ // a node call failed; try the next round
		t.firstErr = cmp.Or(t.firstErr, err)
		return nil
	}
	if err != nil {
		// The key is held: a waiter of an earlier round whose wait was
		// cancelled left its lock behind (a peer that does not undo
		// an acquisition it abandons). The round fails; the next
		// begins once that lock's TTL has run out.
		t.failedRounds++
		t.firstErr = cmp.Or(t.firstErr, fmt.Errorf("holder lock: %w (an earlier round's waiter left its lock behind)", err))
		time.Sleep(r.cfg.TTL)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WaitBudget)
	defer cancel()
	ch := make(chan got, r.cfg.HandoffWaiters)
	for range r.cfg.HandoffWaiters {
		go func() {
			h, err := c.locker.Lock(wctx, t.key)
			ch <- got{h, time.Now(), err}
		}()
	}
	time.Sleep(r.cfg.HandoffHoldMin + rand.N(r.cfg.HandoffHoldMax-r.cfg.HandoffHoldMin+1))
	released := time.Now()
	if err := unlock(ctx, holder); err != nil {
		return fmt.Errorf("holder unlock: %w", err)
	}
	first := <-ch
	cancel() // the other waiters give up
	var winners []Held
	if first.err == nil {
		winners = append(winners, first.h)
		t.samples = append(t.samples, first.at.Sub(released))
	} else {
		// A waiter gave up on a node error (bsm/redislock does): the
		// round has no sample.
		t.failedRounds++
		t.firstErr = cmp.Or(t.firstErr, first.err)
	}
	for range r.cfg.HandoffWaiters - 1 {
		if g := <-ch; g.err == nil {
			winners = append(winners, g.h)
		}
	}
	var errs []error
	if len(winners) > 1 {
		errs = append(errs, fmt.Errorf("mutual exclusion violated: %d waiters hold the lock", len(winners)))
	}
	for _, h := range winners {
		if err := unlock(ctx, h); err != nil {
			errs = append(errs, fmt.Errorf("waiter unlock: %w", err))
		}
	}
	return errors.Join(errs...)
}

// vals returns the contender's figures over its rounds.
func (t *handoffTally) vals(rounds int) (map[string]float64, error) {
	if len(t.samples) == 0 || t.failedRounds > rounds/2 {
		return nil, fmt.Errorf("%d of %d rounds failed, first: %w", t.failedRounds, rounds, t.firstErr)
	}
	m := map[string]float64{
		"p50_ms": ms(pct(t.samples, 50)),
		"p90_ms": ms(pct(t.samples, 90)),
		"failed": float64(t.failedRounds),
	}
	if len(t.pings) > 0 {
		m["rtt_p50_ms"] = ms(pct(t.pings, 50))
	}
	return m, nil
}

// pinger sends PING on one connection of its own.
type pinger struct {
	net.Conn
	r *bufio.Reader
}

func dialPing(addr string) (*pinger, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &pinger{c, bufio.NewReader(c)}, nil
}

// roundTrip times one PING.
func (p *pinger) roundTrip() (time.Duration, error) {
	_ = p.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := p.Write([]byte("PING\r\n")); err != nil {
		return 0, err
	}
	line, err := p.r.ReadString('\n')
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return 0, fmt.Errorf("PING: %q", line)
	}
	return d, nil
}

func runSilent(ctx context.Context, r *runner, c *entry, rep int) (map[string]float64, error) {
	if err := warm(ctx, r, c, c.key("silent", rep, "warm")); err != nil {
		return nil, err
	}
	victim := c.env.Addrs[len(c.env.Addrs)-1]
	if err := r.top.Freeze(victim); err != nil {
		return nil, fmt.Errorf("freeze %s: %w", victim, err)
	}
	defer func() { _ = r.top.Thaw(victim) }()
	var lockLat, unlockLat []time.Duration
	failed := 0
	for i := range r.cfg.SilentOps {
		key := c.key("silent", rep, i) // fresh keys: the frozen node runs queued writes when thawed
		octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		t0 := time.Now()
		h, err := c.locker.TryLock(octx, key)
		cancel()
		lockLat = append(lockLat, time.Since(t0))
		if err != nil {
			failed++
			continue
		}
		octx, cancel = context.WithTimeout(ctx, r.cfg.OpTimeout)
		t0 = time.Now()
		_ = h.Unlock(octx) // the silent node cannot confirm; the quorum can
		cancel()
		unlockLat = append(unlockLat, time.Since(t0))
	}
	if err := r.top.Thaw(victim); err != nil {
		return nil, fmt.Errorf("thaw %s: %w", victim, err)
	}
	out := map[string]float64{
		"lock_p50_ms": ms(pct(lockLat, 50)),
		"lock_p99_ms": ms(pct(lockLat, 99)),
		"failed":      float64(failed),
	}
	if len(unlockLat) > 0 {
		out["unlock_p99_ms"] = ms(pct(unlockLat, 99))
	}
	return out, nil
}

// renewWorkers is how many goroutines take and release the locks of the
// renewal scenario.
const renewWorkers = 32

func runRenewal(ctx context.Context, r *runner, c *entry, rep int) (map[string]float64, error) {
	env := c.env
	env.TTL = r.cfg.RenewTTL
	l, err := c.New(env)
	if err != nil {
		return nil, fmt.Errorf("new locker: %w", err)
	}
	defer l.Close()
	// Warm the new clients from as many goroutines as will take the locks
	// (errors here only show in the acquisitions that follow).
	_ = warmAll(ctx, r, &entry{locker: l}, renewWorkers, func(w int) string { return c.key("renew", rep, "warm", w) })
	var wg sync.WaitGroup
	n := r.cfg.RenewLocks
	held := make([]Held, n)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	// Take n locks from renewWorkers goroutines, each with up to three attempts:
	// taking them is not measured, and on a loaded machine a burst of calls
	// to five nodes runs into the per-node timeout now and then. A lock that
	// still cannot be taken is counted and left out.
	var next, failed atomic.Int64
	errs := make([]error, renewWorkers)
	for w := range errs {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				var h Held
				var err error
				for range 3 {
					if h, err = l.TryLock(ctx, c.key("renew", rep, i)); err == nil || errors.Is(err, errBusy) {
						break
					}
				}
				if err != nil {
					failed.Add(1)
					errs[w] = cmp.Or(errs[w], err)
					continue
				}
				held[i] = h
			}
		})
	}
	wg.Wait()
	release := func() error {
		var rerrs []error
		var mu sync.Mutex
		var next atomic.Int64
		var wg sync.WaitGroup
		for range renewWorkers {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					if h := held[i]; h != nil {
						if err := unlock(ctx, h); err != nil {
							mu.Lock()
							rerrs = append(rerrs, err)
							mu.Unlock()
						}
					}
				}
			})
		}
		wg.Wait()
		if len(rerrs) > 0 {
			return fmt.Errorf("%d unlocks failed, first: %w", len(rerrs), rerrs[0])
		}
		return nil
	}
	if f := failed.Load(); f > int64(n/100) {
		_ = release()
		var first error
		for _, err := range errs {
			first = cmp.Or(first, err)
		}
		return nil, fmt.Errorf("%d of %d locks not taken, first: %w", f, n, first)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()

	s0, err := readAllStats(ctx, env.Addrs)
	if err != nil {
		_ = release()
		return nil, err
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	time.Sleep(r.cfg.RenewWindow)
	cpu1 := cpuTime()
	window := time.Since(t0)
	s1, err := readAllStats(ctx, env.Addrs)
	if err != nil {
		_ = release()
		return nil, err
	}
	lost := 0
	for _, h := range held {
		if a, ok := h.(Aliver); ok && !a.Alive() {
			lost++
		}
	}
	nHeld := float64(n) - float64(failed.Load())
	if err := release(); err != nil && lost == 0 {
		return nil, err
	}
	return map[string]float64{
		"client_cpu":          float64((cpu1 - cpu0).Milliseconds()) / window.Seconds(),
		"server_cpu":          (s1.CPU - s0.CPU) * 1000 / window.Seconds(),
		"server_cmds":         float64(s1.Calls-s0.Calls-int64(len(env.Addrs))) / window.Seconds(), // less the INFOs themselves
		"heap_per_lock":       float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / nHeld,
		"goroutines_per_lock": float64(g1-g0) / nHeld,
		"lost":                float64(lost),
	}, nil
}

// unlock releases h, trying once more when the first call fails (a node
// timing out on a loaded machine), so a failed call does not leave the key
// locked for a whole TTL and starve the rest of the measurement.
func unlock(ctx context.Context, h Held) error {
	err := h.Unlock(ctx)
	if err != nil && ctx.Err() == nil {
		if err2 := h.Unlock(ctx); err2 == nil {
			return nil
		}
	}
	return err
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pct returns the p-th percentile (nearest rank) of d; d is sorted in place.
func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

// cv is the coefficient of variation (stddev / mean) of counts.
func cv(counts []int) float64 {
	var sum float64
	for _, c := range counts {
		sum += float64(c)
	}
	mean := sum / float64(len(counts))
	if mean == 0 {
		return 0
	}
	var ss float64
	for _, c := range counts {
		ss += (float64(c) - mean) * (float64(c) - mean)
	}
	return math.Sqrt(ss/float64(len(counts))) / mean
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
