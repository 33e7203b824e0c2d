package main

// Scale (-scale N1,N2,...): one Manager holding more and more distinct
// locks with auto-renewal, over one rueidis client to one redis-server of
// its own, and what each held lock costs as their number grows. The
// Manager takes locks from -scale-goroutines goroutines (256) until it
// holds N1, measures, takes more until it holds N2, measures, and so on;
// at the end it releases them all. At each N:
//
//   - fill: the rate at which the locks from the previous N to this one
//     were taken.
//   - client heap, goroutine stacks and goroutines per held lock: the
//     change since before the first lock, after a GC, over N.
//   - server bytes per lock: INFO memory used_memory, the same change.
//   - over a window of -scale-hold with the N locks held: renewals per lock
//     per second (INFO commandstats: PEXPIRE calls, counted inside
//     scripts too), script calls (EVALSHA and EVAL) per lock per second,
//     CPU per lock per second of the server (/proc/PID/stat of
//     redis-server) and of this process (getrusage), and the server's CPU
//     per renewal.
//   - lost: locks whose lease ran out while held (their Context had ended
//     with ErrLost; read as a validity, Until, that had passed by the end
//     of the window, so that no context and timer is made per lock).
//   - take and release with N held: ten times, 5,000 more locks taken and
//     then released by the same goroutines, while the N stay held and
//     renewed; the median rate of the ten.
//
// -scale-redsync N1,... runs redsync the same way over the same kind of
// client (rueidis through rueidiscompat), renewed as redsync's users do:
// one goroutine per lock calling Extend every TTL/3.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidiscompat"

	"github.com/dlmgo/dlm"
	rueidisdrv "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// ScaleConfig sizes a -scale run.
type ScaleConfig struct {
	Ns         []int         `json:"n"`
	Redsync    []int         `json:"redsync_n,omitempty"`
	TTL        time.Duration `json:"ttl"`
	Fraction   float64       `json:"renew_fraction"` // dlm: WithAutoRenew(Fraction, 1h); redsync: Extend every TTL·Fraction
	Hold       time.Duration `json:"hold"`
	Goroutines int           `json:"goroutines"`
	Probe      int           `json:"probe"`  // locks taken and released by each probe
	Probes     int           `json:"probes"` // probes at each N
}

// ScaleRow is one library at one N.
type ScaleRow struct {
	Lib  string  `json:"lib"`
	N    int     `json:"n"`
	Fill float64 `json:"fill_per_s"` // locks taken per second on the way from the previous N
	// Rates, per second, of each probe (median shown).
	Take    []float64 `json:"take_per_s"`
	Release []float64 `json:"release_per_s"`

	HeapPerLock        float64 `json:"heap_bytes_per_lock"`
	StackPerLock       float64 `json:"stack_bytes_per_lock"`
	GoroutinesPerLock  float64 `json:"goroutines_per_lock"`
	ServerBytesPerLock float64 `json:"server_bytes_per_lock"`

	Window              float64 `json:"window_s"`
	RenewalsPerLockS    float64 `json:"renewals_per_lock_s"`
	ScriptCallsPerLockS float64 `json:"script_calls_per_lock_s"`
	ServerCPUPerLockS   float64 `json:"server_cpu_us_per_lock_s"`
	ClientCPUPerLockS   float64 `json:"client_cpu_us_per_lock_s"`
	ServerCPUPerRenewal float64 `json:"server_cpu_us_per_renewal"`
	ServerCPUShare      float64 `json:"server_cpu_pct"` // of one core, over the window
	ClientCPUShare      float64 `json:"client_cpu_pct"`

	Lost          int    `json:"lost"`
	NotTaken      int    `json:"not_taken"`
	ReleaseFailed int    `json:"release_failed"`
	Err           string `json:"error,omitempty"`
}

// ScaleReport is a -scale run's results.
type ScaleReport struct {
	Kind    string      `json:"kind"` // "scale", to tell it from a Report
	Note    string      `json:"note,omitempty"`
	Machine Machine     `json:"machine"`
	Config  ScaleConfig `json:"config"`
	Rows    []ScaleRow  `json:"rows"`
	// Drain is each library's rate of releasing every lock at the end.
	Drain   map[string]float64 `json:"drain_per_s"`
	Elapsed string             `json:"elapsed"`
}

// A scaleLocker takes locks that renew themselves.
type scaleLocker interface {
	take(ctx context.Context, key string) (scaleHeld, error)
	close()
}

type scaleHeld interface {
	release(ctx context.Context) error
	// lost reports whether the lease ran out while held.
	lost() bool
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// measureScale runs the -scale measurement and writes its table to w (and,
// with dir set, results.md and results.json into dir).
func measureScale(ctx context.Context, cfg ScaleConfig, note, dir string, w, log io.Writer) error {
	began := time.Now()
	rep := &ScaleReport{Kind: "scale", Note: note, Config: cfg, Drain: map[string]float64{}}
	for _, lib := range []string{"dlm", "redsync"} {
		ns := cfg.Ns
		if lib == "redsync" {
			ns = cfg.Redsync
		}
		if len(ns) == 0 {
			continue
		}
		ns = slices.Sorted(slices.Values(ns))
		rows, drain, m, err := scaleRun(ctx, cfg, lib, ns, log)
		if rep.Machine.Date == "" {
			rep.Machine = m
		}
		if err != nil {
			rows = append(rows, ScaleRow{Lib: lib, Err: err.Error()})
			fmt.Fprintf(log, "%s: ERROR %v\n", lib, err)
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Drain[lib] = drain
		if ctx.Err() != nil {
			break
		}
	}
	rep.Machine.LoadEnd = loadAvg()
	rep.Elapsed = time.Since(began).Round(time.Second).String()
	var md strings.Builder
	rep.writeMarkdown(&md)
	fmt.Fprint(w, md.String())
	if dir != "" {
		if err := writeTables(dir, md.String(), rep); err != nil {
			return err
		}
	}
	var failed []string
	for _, r := range rep.Rows {
		if r.Err != "" {
			failed = append(failed, fmt.Sprintf("%s at %d: %s", r.Lib, r.N, r.Err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d measurements failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return ctx.Err()
}

// scaleRun measures lib holding each of ns locks in turn (ascending), on
// one locker over a redis-server of its own, and returns a row per N and
// the rate at which it released them all at the end.
func scaleRun(ctx context.Context, cfg ScaleConfig, lib string, ns []int, log io.Writer) (rows []ScaleRow, drain float64, m Machine, err error) {
	tmp, err := os.MkdirTemp("", "dlmbench-scale-")
	if err != nil {
		return nil, 0, m, err
	}
	defer os.RemoveAll(tmp)
	srv, err := redistest.Launch(redistest.Config{Dir: tmp})
	if err != nil {
		return nil, 0, m, fmt.Errorf("start redis-server: %w", err)
	}
	defer srv.Stop()
	m = describeMachine(ctx, srv.Addr)
	e := Env{Addrs: []string{srv.Addr}, TTL: cfg.TTL, NodeTimeout: 100 * time.Millisecond, PoolSize: 128}
	var l scaleLocker
	switch lib {
	case "dlm":
		l, err = newScaleDLM(e, cfg)
	case "redsync":
		l, err = newScaleRedsync(e, cfg)
	default:
		err = fmt.Errorf("unknown library %q", lib)
	}
	if err != nil {
		return nil, 0, m, err
	}
	defer l.close()

	// Warm the client from every goroutine, for as many locks as three
	// probes take: the client fills its pools.
	for range 3 {
		if _, err := probe(ctx, l, cfg.Goroutines, make([]scaleHeld, max(cfg.Probe, cfg.Goroutines*4)), "bench:c:scale:warm:"); err != nil {
			return nil, 0, m, fmt.Errorf("warm-up: %w", err)
		}
	}
	held := make([]scaleHeld, ns[len(ns)-1])
	prefix := "bench:c:scale:" + lib + ":"
	var extra []scaleHeld // the probes' locks
	if cfg.Probes > 0 {
		extra = make([]scaleHeld, cfg.Probe)
	}
	releaseHeld := func(n int) (float64, int) {
		start := time.Now()
		failed := releaseAll(ctx, held[:n], cfg.Goroutines)
		return float64(n) / time.Since(start).Seconds(), failed
	}

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	mem0, err := serverInfoInt(ctx, srv.Addr, "memory", "used_memory")
	if err != nil {
		return nil, 0, m, err
	}
	pid := srv.Pid()
	have, notTaken := 0, 0
	for _, n := range ns {
		row := ScaleRow{Lib: lib, N: n}
		fmt.Fprintf(log, "%s, %d locks: ", lib, n)
		start := time.Now()
		nt, first := takeAll(ctx, l, cfg.Goroutines, prefix, held[have:n], have)
		took := time.Since(start)
		row.Fill = float64(n-have-nt) / took.Seconds()
		notTaken += nt
		row.NotTaken = notTaken
		have = n
		if notTaken > n/100 {
			drain, _ = releaseHeld(have)
			return append(rows, row), drain, m, fmt.Errorf("%d of %d locks not taken, first: %w", notTaken, n, first)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		g1 := runtime.NumGoroutine()
		mem1, err := serverInfoInt(ctx, srv.Addr, "memory", "used_memory")
		if err != nil {
			drain, _ = releaseHeld(have)
			return rows, drain, m, err
		}
		nHeld := float64(n - notTaken)
		row.HeapPerLock = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / nHeld
		row.StackPerLock = float64(int64(m1.StackInuse)-int64(m0.StackInuse)) / nHeld
		row.GoroutinesPerLock = float64(g1-g0) / nHeld
		row.ServerBytesPerLock = float64(mem1-mem0) / nHeld
		fmt.Fprintf(log, "filled at %.0f/s; holding %v... ", row.Fill, cfg.Hold)

		cs0, err := commandStats(ctx, srv.Addr)
		if err != nil {
			drain, _ = releaseHeld(have)
			return rows, drain, m, err
		}
		sc0, cc0, t0 := procCPU(pid), cpuTime(), time.Now()
		select {
		case <-time.After(cfg.Hold):
		case <-ctx.Done():
		}
		sc1, cc1, window := procCPU(pid), cpuTime(), time.Since(t0)
		cs1, err := commandStats(ctx, srv.Addr)
		if err != nil {
			drain, _ = releaseHeld(have)
			return rows, drain, m, err
		}
		for _, h := range held[:n] {
			if h != nil && h.lost() {
				row.Lost++
			}
		}
		perLockS := nHeld * window.Seconds()
		renewals := float64(cs1["pexpire"] - cs0["pexpire"])
		scripts := float64(cs1["evalsha"] + cs1["eval"] - cs0["evalsha"] - cs0["eval"])
		row.Window = window.Seconds()
		row.RenewalsPerLockS = renewals / perLockS
		row.ScriptCallsPerLockS = scripts / perLockS
		row.ServerCPUPerLockS = float64((sc1 - sc0).Microseconds()) / perLockS
		row.ClientCPUPerLockS = float64((cc1 - cc0).Microseconds()) / perLockS
		row.ServerCPUShare = 100 * (sc1 - sc0).Seconds() / window.Seconds()
		row.ClientCPUShare = 100 * (cc1 - cc0).Seconds() / window.Seconds()
		if renewals > 0 {
			row.ServerCPUPerRenewal = float64((sc1 - sc0).Microseconds()) / renewals
		}

		// Take and release more while the n are held.
		for p := range cfg.Probes {
			if ctx.Err() != nil {
				break
			}
			clear(extra)
			r, err := probe(ctx, l, cfg.Goroutines, extra, fmt.Sprintf("bench:c:scale:probe:%s:%d:%d:", lib, n, p))
			row.ReleaseFailed += r.releaseFailed
			if err != nil {
				drain, _ = releaseHeld(have)
				return append(rows, row), drain, m, fmt.Errorf("probe %d at %d: %w", p+1, n, err)
			}
			row.Take = append(row.Take, r.take)
			row.Release = append(row.Release, r.release)
		}
		fmt.Fprintf(log, "take %.0f/s, release %.0f/s, heap %.0f B/lock, lost %d\n", median(row.Take), median(row.Release), row.HeapPerLock, row.Lost)
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	drain, failed := releaseHeld(have)
	if failed > 0 {
		rows[len(rows)-1].ReleaseFailed += failed
	}
	return rows, drain, m, nil
}

// probeResult is what one probe measured.
type probeResult struct {
	take, release float64 // per second
	releaseFailed int
}

// probe takes a lock for every slot of held (named prefix+index) from g
// goroutines, then releases them, and returns both rates. It fails when
// more than 1% were not taken.
func probe(ctx context.Context, l scaleLocker, g int, held []scaleHeld, prefix string) (probeResult, error) {
	start := time.Now()
	nt, err := takeAll(ctx, l, g, prefix, held, 0)
	took := time.Since(start)
	start = time.Now()
	failed := releaseAll(ctx, held, g)
	rel := time.Since(start)
	r := probeResult{take: float64(len(held)-nt) / took.Seconds(), release: float64(len(held)-nt) / rel.Seconds(), releaseFailed: failed}
	if nt > len(held)/100 {
		return r, fmt.Errorf("%d of %d locks not taken, first: %w", nt, len(held), err)
	}
	return r, nil
}

// takeAll takes a lock for every slot of held, named prefix+(from+index),
// from g goroutines, each with up to three attempts; it returns how many
// were not taken and the first error.
func takeAll(ctx context.Context, l scaleLocker, g int, prefix string, held []scaleHeld, from int) (int, error) {
	var next, failed atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			key := make([]byte, 0, len(prefix)+12)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(held) || ctx.Err() != nil {
					return
				}
				k := string(strconv.AppendInt(append(key[:0], prefix...), int64(from+i), 10))
				var h scaleHeld
				var err error
				for range 3 {
					if h, err = l.take(ctx, k); err == nil {
						break
					}
				}
				if err != nil {
					failed.Add(1)
					once.Do(func() { first = err })
					continue
				}
				held[i] = h
			}
		})
	}
	wg.Wait()
	return int(failed.Load()), first
}

// releaseAll releases every lock of held from g goroutines, and returns
// how many releases failed.
func releaseAll(ctx context.Context, held []scaleHeld, g int) int {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(held) {
					return
				}
				if h := held[i]; h != nil {
					if err := h.release(ctx); err != nil {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// serverInfoInt reads one integer field of an INFO section.
func serverInfoInt(ctx context.Context, addr, section, field string) (int64, error) {
	kv, err := infoSection(ctx, addr, section)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(kv[field], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO %s from %s: %s: %w", section, addr, field, err)
	}
	return v, nil
}

// commandStats reads INFO commandstats: calls per command (lower case),
// counting the commands scripts ran.
func commandStats(ctx context.Context, addr string) (map[string]int64, error) {
	kv, err := infoSection(ctx, addr, "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for k, v := range kv {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if c, ok := strings.CutPrefix(f, "calls="); ok {
				out[name], _ = strconv.ParseInt(c, 10, 64)
			}
		}
	}
	return out, nil
}

// procCPU is the CPU time (user + system) process pid has used, from
// /proc/PID/stat; 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	// state is the 3rd field of the file, the 1st here; utime and stime are
	// the 14th and 15th.
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}

// ---- dlm ----

type scaleDLM struct {
	m    *dlm.Manager
	stop func()
}

func newScaleDLM(e Env, cfg ScaleConfig) (scaleLocker, error) {
	c, err := newRueidis(e.Addrs[0], e)
	if err != nil {
		return nil, err
	}
	s, err := strategy.NewSingle(rueidisdrv.New(c))
	if err != nil {
		c.Close()
		return nil, err
	}
	m, err := dlm.New(s, dlm.WithTTL(cfg.TTL), dlm.WithAutoRenew(cfg.Fraction, time.Hour))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &scaleDLM{m: m, stop: c.Close}, nil
}

func (d *scaleDLM) take(ctx context.Context, key string) (scaleHeld, error) {
	l, err := d.m.TryLock(ctx, key)
	if err != nil {
		return nil, err
	}
	return (*scaleDLMHeld)(l), nil
}

func (d *scaleDLM) close() { d.stop() }

type scaleDLMHeld dlm.Lock

func (h *scaleDLMHeld) release(ctx context.Context) error { return (*dlm.Lock)(h).Unlock(ctx) }

// lost reads the validity rather than Context, which would make a
// context and a timer for the lock: a lease whose validity passed has a
// Context that ended with ErrLost.
func (h *scaleDLMHeld) lost() bool { return !time.Now().Before((*dlm.Lock)(h).Until()) }

// ---- redsync, renewed by a goroutine per lock ----

type scaleRedsync struct {
	rs    *redsync.Redsync
	ttl   time.Duration
	every time.Duration
	stop  func()
}

func newScaleRedsync(e Env, cfg ScaleConfig) (scaleLocker, error) {
	c, err := newRueidis(e.Addrs[0], e)
	if err != nil {
		return nil, err
	}
	rs := redsync.New(rsrueidis.NewPool(rueidiscompat.NewAdapter(c)))
	return &scaleRedsync{rs: rs, ttl: cfg.TTL, every: time.Duration(float64(cfg.TTL) * cfg.Fraction), stop: c.Close}, nil
}

func (r *scaleRedsync) close() { r.stop() }

type scaleRedsyncHeld struct {
	m    *redsync.Mutex
	stop chan struct{}
	done chan struct{}
}

func (r *scaleRedsync) take(ctx context.Context, key string) (scaleHeld, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(r.ttl), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	h := &scaleRedsyncHeld{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(r.every)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			if ok, err := m.ExtendContext(context.Background()); !ok || err != nil {
				if !time.Now().Before(m.Until()) {
					return // lost: its validity ran out
				}
			}
		}
	}()
	return h, nil
}

func (h *scaleRedsyncHeld) release(ctx context.Context) error {
	close(h.stop)
	<-h.done
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: not unlocked")
	}
	return err
}

func (h *scaleRedsyncHeld) lost() bool { return !time.Now().Before(h.m.Until()) }

// ---- the report ----

func (rep *ScaleReport) writeMarkdown(w io.Writer) {
	m, c := rep.Machine, rep.Config
	fmt.Fprintf(w, "## Scale: one client holding N locks with renewal\n\n")
	fmt.Fprintf(w, "%s, %s, %d cores, %s, %s; load average %s at the start, %s at the end; %s.\n\n",
		m.Date, m.CPU, m.Cores, m.Go, cmp.Or(m.Redis, "Redis "+m.RedisVersion), m.LoadStart, m.LoadEnd, rep.Elapsed)
	if rep.Note != "" {
		fmt.Fprintf(w, "%s\n\n", rep.Note)
	}
	fmt.Fprintf(w, "TTL %v, renewed every %v (dlm: one Manager, WithAutoRenew(%.3g, 1h), strategy.NewSingle over one rueidis client; "+
		"redsync: the same client through rueidiscompat, a goroutine per lock calling Extend). "+
		"Each library holds more and more locks on one client and a redis-server of its own, taking them from %d goroutines; at each N: "+
		"fill, the rate at which it took the locks since the previous N; "+
		"take and release, the median of %d probes each taking %d more locks and releasing them, with the N held; "+
		"per lock, client heap and goroutine stacks (after a GC) and server used_memory; "+
		"over a window of %v with the N held, per lock per second: renewals (PEXPIRE, inside scripts included), script calls, CPU (server: /proc/PID/stat; client: this process); "+
		"lost: leases that ran out while held, by the end of the window.\n\n",
		c.TTL, time.Duration(float64(c.TTL)*c.Fraction).Round(time.Millisecond), c.Fraction, c.Goroutines, c.Probes, c.Probe, c.Hold)
	fmt.Fprintf(w, "| library | N | fill/s | take/s | release/s | client heap B/lock | stack B/lock | goroutines/lock | server B/lock | renewals /lock/s | script calls /lock/s | server CPU µs/lock/s | client CPU µs/lock/s | server CPU µs/renewal | server CPU %% | client CPU %% | lost | not taken | release failed |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rep.Rows {
		if r.Err != "" && r.N == 0 {
			fmt.Fprintf(w, "| %s | | failed: %s |\n", r.Lib, strings.ReplaceAll(r.Err, "|", "/"))
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.0f | %.0f | %.3f | %.0f | %.3f | %.4f | %.2f | %.2f | %.2f | %.1f | %.1f | %d | %d | %d |\n",
			r.Lib, group(r.N), group(int(r.Fill)), group(int(median(r.Take))), group(int(median(r.Release))),
			r.HeapPerLock, r.StackPerLock, r.GoroutinesPerLock, r.ServerBytesPerLock,
			r.RenewalsPerLockS, r.ScriptCallsPerLockS, r.ServerCPUPerLockS, r.ClientCPUPerLockS, r.ServerCPUPerRenewal,
			r.ServerCPUShare, r.ClientCPUShare, r.Lost, r.NotTaken, r.ReleaseFailed)
	}
	libs := slices.Sorted(maps.Keys(rep.Drain))
	if len(libs) > 0 {
		fmt.Fprintf(w, "\nReleasing every lock at the end:")
		for i, lib := range libs {
			sep := ","
			if i == len(libs)-1 {
				sep = "."
			}
			fmt.Fprintf(w, " %s %s/s%s", lib, group(int(rep.Drain[lib])), sep)
		}
		fmt.Fprintln(w)
	}
}

// group writes n with thousands separators.
func group(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// infoSection reads one section of INFO as its fields.
func infoSection(ctx context.Context, addr, section string) (map[string]string, error) {
	c := goredislib.NewClient(&goredislib.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s from %s: %w", section, addr, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// loadScaleReport reads a -scale run's results.json; ok is false when file
// holds another kind of report.
func loadScaleReport(file string) (rep *ScaleReport, ok bool, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, false, err
	}
	var kind struct{ Kind string }
	if err := json.Unmarshal(b, &kind); err != nil || kind.Kind != "scale" {
		return nil, false, err
	}
	rep = new(ScaleReport)
	if err := json.Unmarshal(b, rep); err != nil {
		return nil, false, fmt.Errorf("%s: %w", file, err)
	}
	return rep, true, nil
}
