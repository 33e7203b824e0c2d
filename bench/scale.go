package main

// Scale (-scale N1,N2,...): one Manager holding N distinct locks with
// auto-renewal, over one rueidis client to one redis-server of its own,
// and what each held lock costs as N grows. For each N:
//
//   - take: N locks taken by TryLock from -scale-goroutines goroutines
//     (256), per second; release: the same N released, per second. For N
//     below 100,000 the take and release are repeated until 100,000 locks
//     have been taken (at most 50 rounds), and the median round is shown.
//   - client heap, goroutine stacks and goroutines per held lock: the
//     change from before the first take to after it, each after a GC.
//   - server bytes per lock: INFO memory used_memory, the same change.
//   - over a window of -scale-hold with every lock held: renewals per lock
//     per second (INFO commandstats: PEXPIRE calls, counted inside scripts
//     too), script calls (EVALSHA and EVAL) per lock per second, CPU per
//     lock per second of the server (/proc/PID/stat of redis-server) and of
//     this process (getrusage), and the server's CPU per renewal.
//   - lost: locks whose lease ran out while held (their Context had ended
//     with ErrLost; read as a validity, Until, that had passed by the end
//     of the window, so that no context and timer is made per lock).
//
// -scale-redsync N1,... runs redsync over the same kind of client (rueidis
// through rueidiscompat) at those N, renewed as redsync's users do: one
// goroutine per lock calling Extend every TTL/3.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	MinTaken   int           `json:"min_taken"` // take and release are repeated until this many were taken
	MaxRounds  int           `json:"max_rounds"`
}

// ScaleRow is one library at one N.
type ScaleRow struct {
	Lib    string `json:"lib"`
	N      int    `json:"n"`
	Rounds int    `json:"rounds"`
	// Rates, per second, of each round (median shown).
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
	Note    string      `json:"note,omitempty"`
	Machine Machine     `json:"machine"`
	Config  ScaleConfig `json:"config"`
	Rows    []ScaleRow  `json:"rows"`
	Elapsed string      `json:"elapsed"`
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
	rep := &ScaleReport{Note: note, Config: cfg}
	type job struct {
		lib string
		n   int
	}
	var jobs []job
	for _, n := range cfg.Ns {
		jobs = append(jobs, job{"dlm", n})
		if slices.Contains(cfg.Redsync, n) {
			jobs = append(jobs, job{"redsync", n})
		}
	}
	for _, n := range cfg.Redsync {
		if !slices.Contains(cfg.Ns, n) {
			jobs = append(jobs, job{"redsync", n})
		}
	}
	for i, j := range jobs {
		fmt.Fprintf(log, "%s, %d locks: ", j.lib, j.n)
		row, m := scaleOne(ctx, cfg, j.lib, j.n, log)
		if i == 0 {
			rep.Machine = m
		}
		if row.Err != "" {
			fmt.Fprintf(log, "ERROR %s\n", row.Err)
		} else {
			fmt.Fprintf(log, "take %.0f/s, release %.0f/s, heap %.0f B/lock, lost %d\n", median(row.Take), median(row.Release), row.HeapPerLock, row.Lost)
		}
		rep.Rows = append(rep.Rows, row)
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
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
			return err
		}
		js, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
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

// scaleOne measures lib holding n locks, on a redis-server of its own.
func scaleOne(ctx context.Context, cfg ScaleConfig, lib string, n int, log io.Writer) (row ScaleRow, m Machine) {
	row = ScaleRow{Lib: lib, N: n}
	fail := func(err error) (ScaleRow, Machine) {
		row.Err = err.Error()
		return row, m
	}
	tmp, err := os.MkdirTemp("", "dlmbench-scale-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	srv, err := redistest.Launch(redistest.Config{Dir: tmp})
	if err != nil {
		return fail(fmt.Errorf("start redis-server: %w", err))
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
		return fail(err)
	}
	defer l.close()

	// Warm the client from every goroutine.
	if _, _, err := scaleRound(ctx, l, cfg.Goroutines, cfg.Goroutines*4, "bench:c:scale:warm:", nil); err != nil {
		return fail(fmt.Errorf("warm-up: %w", err))
	}
	held := make([]scaleHeld, n)
	prefix := "bench:c:scale:" + lib + ":"

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	mem0, err := serverInfoInt(ctx, srv.Addr, "memory", "used_memory")
	if err != nil {
		return fail(err)
	}

	// The first round: take n, hold them for the window, release them.
	start := time.Now()
	notTaken, firstErr := takeAll(ctx, l, cfg.Goroutines, prefix, held)
	took := time.Since(start)
	row.NotTaken = notTaken
	if notTaken > n/100 {
		releaseAll(ctx, held, cfg.Goroutines)
		return fail(fmt.Errorf("%d of %d locks not taken, first: %w", notTaken, n, firstErr))
	}
	row.Take = append(row.Take, float64(n-notTaken)/took.Seconds())
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	mem1, err := serverInfoInt(ctx, srv.Addr, "memory", "used_memory")
	if err != nil {
		releaseAll(ctx, held, cfg.Goroutines)
		return fail(err)
	}
	nHeld := float64(n - notTaken)
	row.HeapPerLock = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / nHeld
	row.StackPerLock = float64(int64(m1.StackInuse)-int64(m0.StackInuse)) / nHeld
	row.GoroutinesPerLock = float64(g1-g0) / nHeld
	row.ServerBytesPerLock = float64(mem1-mem0) / nHeld
	fmt.Fprintf(log, "taken in %v; holding %v... ", took.Round(time.Millisecond), cfg.Hold)

	pid := srv.Pid()
	cs0, err := commandStats(ctx, srv.Addr)
	if err != nil {
		releaseAll(ctx, held, cfg.Goroutines)
		return fail(err)
	}
	sc0, cc0, t0 := procCPU(pid), cpuTime(), time.Now()
	select {
	case <-time.After(cfg.Hold):
	case <-ctx.Done():
	}
	sc1, cc1, window := procCPU(pid), cpuTime(), time.Since(t0)
	cs1, err := commandStats(ctx, srv.Addr)
	if err != nil {
		releaseAll(ctx, held, cfg.Goroutines)
		return fail(err)
	}
	for _, h := range held {
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

	start = time.Now()
	failed := releaseAll(ctx, held, cfg.Goroutines)
	row.Release = append(row.Release, nHeld/time.Since(start).Seconds())
	row.ReleaseFailed += failed

	// Further rounds, for the rates only, until MinTaken were taken.
	row.Rounds = 1
	for taken := n; taken < cfg.MinTaken && row.Rounds < cfg.MaxRounds && ctx.Err() == nil; taken += n {
		clear(held)
		start := time.Now()
		nt, err := takeAll(ctx, l, cfg.Goroutines, prefix, held)
		tk := time.Since(start)
		if nt > n/100 {
			releaseAll(ctx, held, cfg.Goroutines)
			return fail(fmt.Errorf("round %d: %d of %d locks not taken, first: %w", row.Rounds+1, nt, n, err))
		}
		start = time.Now()
		f := releaseAll(ctx, held, cfg.Goroutines)
		rl := time.Since(start)
		row.Take = append(row.Take, float64(n-nt)/tk.Seconds())
		row.Release = append(row.Release, float64(n-nt)/rl.Seconds())
		row.NotTaken += nt
		row.ReleaseFailed += f
		row.Rounds++
	}
	return row, m
}

// scaleRound takes count locks named prefix+i from g goroutines and
// releases each at once (a warm-up).
func scaleRound(ctx context.Context, l scaleLocker, g, count int, prefix string, _ []scaleHeld) (int, time.Duration, error) {
	held := make([]scaleHeld, count)
	start := time.Now()
	nt, err := takeAll(ctx, l, g, prefix, held)
	releaseAll(ctx, held, g)
	if nt > count/2 {
		return nt, time.Since(start), err
	}
	return nt, time.Since(start), nil
}

// takeAll takes a lock for every slot of held, named prefix+index, from g
// goroutines, each with up to three attempts; it returns how many were not
// taken and the first error.
func takeAll(ctx context.Context, l scaleLocker, g int, prefix string, held []scaleHeld) (int, error) {
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
				k := string(strconv.AppendInt(append(key[:0], prefix...), int64(i), 10))
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
	fmt.Fprintf(w, "TTL %v, renewed every %v (dlm: one Manager, WithAutoRenew(%.3g, 1h), strategy.NewSingle over one rueidis client; redsync: the same client through rueidiscompat, a goroutine per lock calling Extend); "+
		"%d goroutines take and release the locks, a redis-server of its own per row; the window with every lock held: %v. "+
		"take and release: locks per second, median of the rounds (repeated until %d were taken, at most %d rounds). "+
		"Per lock: client heap and goroutine stacks (after a GC), server used_memory; per lock per second over the window: renewals (PEXPIRE, inside scripts included), script calls, CPU (server: /proc/PID/stat; client: this process). "+
		"lost: leases that ran out while held.\n\n",
		c.TTL, time.Duration(float64(c.TTL)*c.Fraction).Round(time.Millisecond), c.Fraction, c.Goroutines, c.Hold, c.MinTaken, c.MaxRounds)
	fmt.Fprintf(w, "| library | N | take/s | release/s | rounds | client heap B/lock | stack B/lock | goroutines/lock | server B/lock | renewals /lock/s | script calls /lock/s | server CPU µs/lock/s | client CPU µs/lock/s | server CPU µs/renewal | server CPU %% | client CPU %% | lost | not taken | release failed |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rep.Rows {
		if r.Err != "" {
			fmt.Fprintf(w, "| %s | %s | failed: %s |\n", r.Lib, group(r.N), strings.ReplaceAll(r.Err, "|", "/"))
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %.0f | %.0f | %.3f | %.0f | %.3f | %.4f | %.2f | %.2f | %.2f | %.1f | %.1f | %d | %d | %d |\n",
			r.Lib, group(r.N), group(int(median(r.Take))), group(int(median(r.Release))), r.Rounds,
			r.HeapPerLock, r.StackPerLock, r.GoroutinesPerLock, r.ServerBytesPerLock,
			r.RenewalsPerLockS, r.ScriptCallsPerLockS, r.ServerCPUPerLockS, r.ClientCPUPerLockS, r.ServerCPUPerRenewal,
			r.ServerCPUShare, r.ClientCPUShare, r.Lost, r.NotTaken, r.ReleaseFailed)
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
