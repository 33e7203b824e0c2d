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
		env := Env{Addrs: addrs, TTL: cfg.TTL, NodeTimeout: cfg.NodeTimeout, RetryMin: cfg.RetryMin,
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
		sr := ScenarioResult{Name: s.Name, Title: s.Title, Metrics: s.Metrics, Reps: reps, Rounds: s.Rounds}
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
		record := func(i, k int, vals map[string]float64, err error, took time.Duration) {
			row := rows[i]
			if err != nil {
				row.Errors = append(row.Errors, fmt.Sprintf("rep %d: %v", k+1, err))
				fmt.Fprintf(progress, "ERROR %v\n", err)
				return
			}
			for _, m := range s.Metrics {
				if v, ok := vals[m.Key]; ok {
					row.Samples[m.Key] = append(row.Samples[m.Key], v)
				}
			}
			fmt.Fprintf(progress, "%s  (%.1fs)\n", brief(s.Metrics, vals), took.Seconds())
		}
		for k := range reps {
			order := make([]*entry, len(in)) // rotated by one each repetition
			for j := range in {
				order[j] = in[(j+k)%len(in)]
			}
			if s.RunAll != nil {
				t0 := time.Now()
				sctx, cancel := context.WithTimeout(ctx, scenarioTimeout)
				vals, errs := s.RunAll(sctx, r, order, k)
				cancel()
				for j, e := range order {
					fmt.Fprintf(progress, "%-9s rep %d/%d  %-28s ", s.Name, k+1, reps, e.Name)
					record((j+k)%len(in), k, vals[j], errs[j], time.Since(t0))
				}
			} else {
				for j, e := range order {
					fmt.Fprintf(progress, "%-9s rep %d/%d  %-28s ", s.Name, k+1, reps, e.Name)
					t0 := time.Now()
					sctx, cancel := context.WithTimeout(ctx, scenarioTimeout)
					vals, err := s.Run(sctx, r, e, k)
					cancel()
					record((j+k)%len(in), k, vals, err, time.Since(t0))
				}
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
