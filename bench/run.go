package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"
)

// runner carries what every scenario needs.
type runner struct {
	cfg      Config
	top      Topology
	progress io.Writer
}

// Options selects part of the registry and the scenarios.
type Options struct {
	Only      *regexp.Regexp // contenders whose name matches; nil for all
	Scenarios []string       // scenario names; empty for all
	Note      string         // written into the results (e.g. "preliminary")
}

// scenarioTimeout bounds one repetition of one scenario for one contender,
// so a library that ignores its context fails the run instead of hanging it.
const scenarioTimeout = 3 * time.Minute

// run measures every selected contender in every selected scenario. Within
// a repetition each contender runs once, in an order rotated by one per
// repetition, so drift of the machine hits all alike; each figure is the
// median over the repetitions. Errors of single measurements are recorded
// in the report, not returned; the error is for a run that could not start.
func run(ctx context.Context, cfg Config, top Topology, o Options, progress io.Writer) (*Report, error) {
	if len(top.Single) != 1 {
		return nil, fmt.Errorf("need exactly one single-instance address, have %d", len(top.Single))
	}
	if len(top.Multi) != 0 && len(top.Multi) != 5 {
		return nil, fmt.Errorf("need five Redlock addresses (or none), have %d", len(top.Multi))
	}
	began := time.Now()
	var err error
	r := &runner{cfg: cfg, top: top, progress: progress}
	rep := &Report{Note: o.Note, Config: cfg}
	rep.Machine = describeMachine(ctx, top.Single[0])
	runStart := readCPUTimes()

	var entries []*entry
	defer func() {
		for _, e := range entries {
			_ = e.locker.Close()
		}
	}()
	for i, c := range contenders {
		if o.Only != nil && !o.Only.MatchString(c.Name) {
			continue
		}
		addrs := top.Single
		if c.Nodes == 5 {
			addrs = top.Multi
		}
		if len(addrs) != c.Nodes {
			fmt.Fprintf(progress, "skip %s: no %d-node topology\n", c.Name, c.Nodes)
			continue
		}
		env := Env{Addrs: addrs, TTL: cfg.TTL, NodeTimeout: cfg.NodeTimeout, Bounded: cfg.Bounded, RetryMin: cfg.RetryMin,
			RetryMax: cfg.RetryMax, PoolSize: cfg.PoolSize, RedisVersion: rep.Machine.RedisVersion}
		l, err := c.New(env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		entries = append(entries, &entry{Contender: c, idx: i, env: env, locker: l})
		rep.Contenders = append(rep.Contenders, ContenderInfo{Name: c.Name, Lib: c.Lib, Nodes: c.Nodes, Renews: c.Renews, Note: c.Note})
	}
	if len(entries) == 0 {
		return nil, errors.New("no contender selected")
	}
	fmt.Fprintf(progress, "%d contenders, %d repetitions per figure (silent-node: %d%s)\n", len(entries), cfg.Reps, cfg.SilentReps, renewReps(cfg))

	plan := r.plan(entries, o)
	var total time.Duration
	for _, p := range plan {
		total += p.est
	}
	fmt.Fprintf(progress, "estimated duration: %s (a rough guess for a quiet 2-core machine)\n", total.Round(time.Second))

	for _, p := range plan {
		s, in, reps := p.s, p.in, p.reps
		sr := ScenarioResult{Name: s.Name, Title: s.Title, Metrics: s.Metrics, Reps: reps}
		if s.Rounds != nil {
			sr.Rounds = s.Rounds(r.cfg)
		}
		sStart, stealStart := time.Now(), readCPUTimes()
		unpin := func() {}
		if s.OneCPU {
			sr.Placement = "this process (GOMAXPROCS 1) and every server pinned to one CPU"
			if top.Pin == nil {
				sr.Placement = "not pinned (servers not started by this run, or not Linux)"
			} else if unpin, err = top.Pin(); err != nil {
				return nil, fmt.Errorf("%s: pinning to one CPU: %w", s.Name, err)
			}
		}
		rows := make([]*Row, len(in))
		for i, e := range in {
			rows[i] = &Row{Contender: e.Name, Lib: e.Lib, Nodes: e.Nodes, Samples: map[string][]float64{}}
		}
		show := func(vals map[string]float64, err error, took time.Duration) {
			if err != nil {
				fmt.Fprintf(progress, "ERROR %v\n", err)
				return
			}
			fmt.Fprintf(progress, "%s  (%.1fs)\n", brief(s.Metrics, vals), took.Seconds())
		}
		record := func(i, k int, vals map[string]float64, err error) {
			row := rows[i]
			if err != nil {
				row.Errors = append(row.Errors, fmt.Sprintf("rep %d: %v", k+1, err))
				return
			}
			for _, m := range s.Metrics {
				if v, ok := vals[m.Key]; ok {
					row.Samples[m.Key] = append(row.Samples[m.Key], v)
				}
			}
		}
		for k := range reps {
			order := make([]*entry, len(in)) // rotated by one each repetition
			for j := range in {
				order[j] = in[(j+k)%len(in)]
			}
			kept, spread, redone := r.runRep(ctx, s, order, k, reps, progress, show)
			sr.Redone += redone
			if spread >= 0 {
				sr.StealSpread = append(sr.StealSpread, spread)
			}
			for j, g := range kept {
				record((j+k)%len(in), k, g.vals, g.err)
			}
			if ctx.Err() != nil {
				unpin()
				return nil, ctx.Err()
			}
		}
		unpin()
		sr.Steal = stealText(stealStart, readCPUTimes())
		if err := cleanKeys(ctx, append(slices.Clone(top.Single), top.Multi...)); err != nil {
			fmt.Fprintf(progress, "clean-up after %s: %v\n", s.Name, err)
		}
		for _, row := range rows {
			row.Median = map[string]float64{}
			for k, v := range row.Samples {
				row.Median[k] = median(v)
			}
			sr.Rows = append(sr.Rows, *row)
		}
		sr.ratios()
		rep.Scenarios = append(rep.Scenarios, sr)
		fmt.Fprintf(progress, "%s done in %s, estimated %s (%s since start)\n", s.Name,
			time.Since(sStart).Round(time.Second), p.est.Round(time.Second), time.Since(began).Round(time.Second))
	}
	rep.Machine.LoadEnd = loadAvg()
	rep.Machine.Steal = stealText(runStart, readCPUTimes())
	rep.Elapsed = time.Since(began).Round(time.Second).String()
	return rep, nil
}

// scenarioPlan is one selected scenario with its contenders.
type scenarioPlan struct {
	s    Scenario
	in   []*entry
	reps int
	est  time.Duration // rough duration of all its repetitions
}

// plan lists the selected scenarios that some entry joins.
func (r *runner) plan(entries []*entry, o Options) []scenarioPlan {
	var out []scenarioPlan
	for _, s := range scenarios {
		if len(o.Scenarios) > 0 && !slices.Contains(o.Scenarios, s.Name) {
			continue
		}
		p := scenarioPlan{s: s, reps: r.cfg.Reps}
		if s.Reps != nil {
			p.reps = s.Reps(r.cfg)
		}
		for _, e := range entries {
			if e.joins(s, r.top) {
				p.in = append(p.in, e)
				p.est += time.Duration(p.reps) * s.Est(r.cfg, e.Contender)
			}
		}
		if len(p.in) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// stealSpreadMax is how far apart, in points, the steal time of a
// repetition's contenders may lie before the repetition is run again (see
// Config.StealRedo): a contender that the hypervisor took a fifth of the
// CPUs from is not measured against one it took nothing from.
const stealSpreadMax = 3.0

// An attempt is one contender's run in one attempt at a repetition.
type attempt struct {
	vals map[string]float64
	err  error
}

// stealSpread is how far apart, in points, the steal time of the
// contenders that reported one lies (false when fewer than two did).
func stealSpread(got []attempt) (float64, bool) {
	lo, hi, n := 0.0, 0.0, 0
	for _, g := range got {
		v, ok := g.vals["steal_pct"]
		if g.err != nil || !ok {
			continue
		}
		if n == 0 || v < lo {
			lo = v
		}
		if n == 0 || v > hi {
			hi = v
		}
		n++
	}
	return hi - lo, n >= 2
}

// hasMetric reports whether ms has one with key.
func hasMetric(ms []Metric, key string) bool {
	return slices.ContainsFunc(ms, func(m Metric) bool { return m.Key == key })
}

// runRep runs repetition k of s, its contenders in order, and shows each
// result. A scenario that reports each contender's steal time is run again,
// up to StealRedo times, while that lies more than stealSpreadMax points
// apart. It returns the attempt kept (the one with the least spread), its
// spread (−1 when not measured) and how many times it ran again.
func (r *runner) runRep(ctx context.Context, s Scenario, order []*entry, k, reps int, progress io.Writer,
	show func(map[string]float64, error, time.Duration)) (kept []attempt, spread float64, redone int) {
	tries := 1
	if hasMetric(s.Metrics, "steal_pct") {
		tries += r.cfg.StealRedo
	}
	spread = -1
	for a := range tries {
		got := r.attempt(ctx, s, order, k, reps, progress, show)
		d, ok := stealSpread(got)
		if !ok {
			return got, -1, redone
		}
		if kept == nil || d < spread {
			kept, spread = got, d
		}
		if d <= stealSpreadMax || a == tries-1 || ctx.Err() != nil {
			break
		}
		redone++
		fmt.Fprintf(progress, "%-9s rep %d/%d: the contenders' steal time lay %.1f points apart (more than %g): again\n",
			s.Name, k+1, reps, d, stealSpreadMax)
	}
	return kept, spread, redone
}

// attempt runs repetition k of s once, its contenders in order (by s.Run
// one after another, or together by s.RunAll), and shows each result.
func (r *runner) attempt(ctx context.Context, s Scenario, order []*entry, k, reps int, progress io.Writer,
	show func(map[string]float64, error, time.Duration)) []attempt {
	got := make([]attempt, len(order))
	if s.RunAll != nil {
		t0 := time.Now()
		// Each contender has its scenarioTimeout, as when they run one
		// after another.
		sctx, cancel := context.WithTimeout(ctx, time.Duration(len(order))*scenarioTimeout)
		vals, errs := s.RunAll(sctx, r, order, k)
		cancel()
		for j, e := range order {
			fmt.Fprintf(progress, "%-9s rep %d/%d  %-28s ", s.Name, k+1, reps, e.Name)
			got[j] = attempt{vals[j], errs[j]}
			show(vals[j], errs[j], time.Since(t0))
		}
		return got
	}
	for j, e := range order {
		fmt.Fprintf(progress, "%-9s rep %d/%d  %-28s ", s.Name, k+1, reps, e.Name)
		t0 := time.Now()
		sctx, cancel := context.WithTimeout(ctx, scenarioTimeout)
		got[j].vals, got[j].err = s.Run(sctx, r, e, k)
		cancel()
		show(got[j].vals, got[j].err, time.Since(t0))
	}
	return got
}

// brief formats a repetition's figures for the progress line.
func brief(ms []Metric, vals map[string]float64) string {
	var s string
	for _, m := range ms {
		if v, ok := vals[m.Key]; ok {
			s += fmt.Sprintf("%s=%s%s ", m.Label, num(v), m.Unit)
		}
	}
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
