// Command dlmbench measures dlm against redsync, bsm/redislock and
// rueidislock on the same Redis servers, in one run.
//
//	cd bench && go run . -out results      # full run, 10–15 minutes on 2 cores
//	cd bench && go run . -smoke            # seconds; what CI runs (through go test)
//	cd bench && go run . -list             # what would run, and an estimate of how long
//
// By default it starts its own redis-server processes on loopback ports (one
// for single-instance contenders, five for Redlock contenders) and kills them
// at the end. With -single and -redlock it uses the given servers instead
// (it writes and deletes keys containing "bench:c"; the silent-node scenario
// needs servers it started, so it is skipped).
//
// Progress goes to stderr, starting with an estimate of the duration; the
// tables go to stdout and, with -out, to results.md, results.json and
// chart.svg in that directory. Contenders are listed in contenders.go. The
// exit status is 1 when any measurement failed (the results are written
// first, with the errors).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := mainErr(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dlmbench:", err)
		os.Exit(1)
	}
}

func mainErr(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlmbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	smoke := fs.Bool("smoke", false, "tiny counts, one repetition: checks that every contender runs every scenario")
	reps := fs.Int("reps", 0, "repetitions per figure (default 5, or 1 with -smoke)")
	out := fs.String("out", "", `directory for results.md, results.json and chart.svg ("" writes none)`)
	single := fs.String("single", "", "address of a Redis server for single-instance contenders (default: start one)")
	redlock := fs.String("redlock", "", "five comma-separated addresses of independent masters for Redlock contenders (default: start five)")
	only := fs.String("only", "", "run only contenders whose name matches this regular expression")
	scen := fs.String("scenarios", "", "comma-separated scenarios to run (serial,distinct,contended,handoff,silent,renewal); default all")
	note := fs.String("note", "", "a note written into the results (e.g. that the machine was busy)")
	list := fs.Bool("list", false, "list the selected contenders and scenarios with an estimate of the run's duration, and exit")
	rtt := fs.Duration("rtt", 0, "put every server behind a latency proxy (in this process) adding this round trip; the silent scenario is then skipped")
	instructions := fs.Int("instructions", 0, "count the server's instructions per lock+unlock pair instead, under valgrind's callgrind: this many pairs per one-node contender (-only selects them), on a server of its own")
	instrGoroutines := fs.Int("instructions-goroutines", 16, "goroutines making the pairs of -instructions")
	render := fs.String("render", "", "write results.md and chart.svg again from this results.json (into -out, default its directory), without measuring")
	doc := fs.String("doc", "", "with -render, also rewrite the bench summary in this Markdown file (docs/performance.md)")
	cpuprofile := fs.String("cpuprofile", "", "write this process's CPU profile (pprof) of the run to this file")
	scale := fs.String("scale", "", "instead of the comparison: hold more and more locks on one Manager with auto-renewal, measuring at each comma-separated N (e.g. 1000,10000,100000,1000000) what each held lock costs and how fast locks are taken and released (scale.go)")
	scaleTTL := fs.Duration("scale-ttl", 10*time.Second, "with -scale: the locks' TTL")
	scaleHold := fs.Duration("scale-hold", 30*time.Second, "with -scale: how long every lock is held while renewals and CPU are measured")
	scaleG := fs.Int("scale-goroutines", 256, "with -scale: goroutines taking and releasing the locks")
	scaleProbe := fs.Int("scale-probe", 5000, "with -scale: locks each probe takes and releases while N are held")
	scaleProbes := fs.Int("scale-probes", 10, "with -scale: probes at each N")
	scaleRedsync := fs.String("scale-redsync", "", "with -scale: also measure redsync (a goroutine per lock calling Extend) at these comma-separated N")
	nodeTimeout := fs.Duration("node-timeout", 0, "the per-node timeout every contender gets (default 100ms, 300ms with -smoke)")
	bounded := fs.Bool("bounded", false, "bound every call of every contender by the per-node timeout: dlm's single-instance strategy gets strategy.WithTimeout, bsm/redislock a context per call (the others have a per-node timeout of their own)")
	busy := fs.Int("busy", 0, "run this many busy loops (sh -c 'while :; do :; done') beside the measurement, killed at its end")
	heapprofile := fs.String("heapprofile", "", "write this process's heap profile (pprof) at the end of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *render != "" {
		dir := *out
		if dir == "" {
			dir = filepath.Dir(*render)
		}
		return rerender(*render, dir, *doc, stdout)
	}
	cfg := fullConfig()
	if *smoke {
		cfg = smokeConfig()
	}
	if *reps > 0 {
		cfg.Reps = *reps
		cfg.SilentReps = min(cfg.SilentReps, *reps)
		cfg.RenewReps = min(cfg.RenewReps, *reps)
	}
	if *nodeTimeout > 0 {
		cfg.NodeTimeout = *nodeTimeout
	}
	cfg.Bounded = *bounded
	var o Options
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fmt.Errorf("-only: %w", err)
		}
		o.Only = re
	}
	if *scen != "" {
		o.Scenarios = strings.Split(*scen, ",")
		for _, s := range o.Scenarios {
			if !knownScenario(s) {
				return fmt.Errorf("-scenarios: unknown scenario %q", s)
			}
		}
	}
	o.Note = *note
	if *list {
		// What a run with these flags would measure, on servers it starts.
		r := &runner{cfg: cfg, top: Topology{Single: []string{""}, Multi: make([]string, 5), Freeze: func(string) error { return nil }}}
		var entries []*entry
		for _, c := range contenders {
			if o.Only == nil || o.Only.MatchString(c.Name) {
				fmt.Fprintf(stdout, "%-32s %-14s nodes=%d renews=%v\n", c.Name, c.Lib, c.Nodes, c.Renews)
				entries = append(entries, &entry{Contender: c})
			}
		}
		var total time.Duration
		for _, p := range r.plan(entries, o) {
			fmt.Fprintf(stdout, "%-9s %2d contenders × %d repetitions, estimated %s\n", p.s.Name, len(p.in), p.reps, p.est.Round(time.Second))
			total += p.est
		}
		fmt.Fprintf(stdout, "estimated duration: %s\n", total.Round(time.Second))
		return nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *heapprofile != "" {
		defer func() {
			if f, err := os.Create(*heapprofile); err == nil {
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
		}()
	}
	if *busy > 0 {
		stopBusy, err := startBusy(*busy)
		if err != nil {
			return err
		}
		defer stopBusy()
		fmt.Fprintf(stderr, "%d busy loops beside the run\n", *busy)
		if o.Note != "" {
			o.Note += " "
		}
		o.Note += fmt.Sprintf("%d busy loops (sh -c 'while :; do :; done') ran beside the measurement (-busy %d).", *busy, *busy)
	}
	if *instructions > 0 {
		return measureInstructions(ctx, o, *instructions, *instrGoroutines, stdout, stderr)
	}
	if *scale != "" {
		ns, err := parseInts(*scale)
		if err != nil {
			return fmt.Errorf("-scale: %w", err)
		}
		rs, err := parseInts(*scaleRedsync)
		if err != nil {
			return fmt.Errorf("-scale-redsync: %w", err)
		}
		cfg := ScaleConfig{Ns: ns, Redsync: rs, TTL: *scaleTTL, Fraction: 1.0 / 3, Hold: *scaleHold,
			Goroutines: *scaleG, Probe: *scaleProbe, Probes: *scaleProbes}
		return measureScale(ctx, cfg, o.Note, *out, stdout, stderr)
	}

	var top Topology
	if *single != "" || *redlock != "" {
		if *single == "" {
			return fmt.Errorf("-redlock needs -single as well")
		}
		top.Single = []string{*single}
		if *redlock != "" {
			top.Multi = strings.Split(*redlock, ",")
		}
	} else {
		srv, addrs, err := startServers(6)
		if err != nil {
			return err
		}
		defer srv.stop()
		top = Topology{Single: addrs[:1], Multi: addrs[1:], Freeze: srv.Freeze, Thaw: srv.Thaw}
		if canPin() {
			top.Pin = srv.Pin
		}
		fmt.Fprintf(stderr, "started redis-server on %s (single) and %s (redlock)\n", addrs[0], strings.Join(addrs[1:], ", "))
	}

	if *rtt > 0 {
		var stopProxies func()
		var err error
		all := append(append([]string{}, top.Single...), top.Multi...)
		if all, stopProxies, err = withRTT(all, *rtt); err != nil {
			return err
		}
		defer stopProxies()
		top = Topology{Single: all[:len(top.Single)], Multi: all[len(top.Single):], Pin: top.Pin}
		fmt.Fprintf(stderr, "every server behind a proxy adding %v per round trip\n", *rtt)
		if o.Note != "" {
			o.Note += " "
		}
		o.Note += fmt.Sprintf("Every server behind a latency proxy (in the benchmark's process) adding %v to each round trip.", *rtt)
	}
	rep, err := run(ctx, cfg, top, o, stderr)
	if err != nil {
		return err
	}
	rep.WriteMarkdown(stdout)
	if *out != "" {
		if err := writeResults(*out, rep); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", filepath.Join(*out, "{results.md,results.json,chart.svg}"))
	}
	if errs := rep.Errors(); len(errs) > 0 {
		return fmt.Errorf("%d measurements failed:\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	return nil
}

func knownScenario(name string) bool {
	for _, s := range scenarios {
		if s.Name == name {
			return true
		}
	}
	return false
}

// writeResults writes rep into dir as results.md, results.json and
// chart.svg.
func writeResults(dir string, rep *Report) error {
	var md strings.Builder
	rep.WriteMarkdown(&md)
	md.WriteString("\n![chart](chart.svg)\n")
	if err := writeTables(dir, md.String(), rep); err != nil {
		return err
	}
	var svg strings.Builder
	if err := rep.WriteSVG(&svg); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "chart.svg"), []byte(svg.String()), 0o644)
}

// writeTables makes dir and writes md into its results.md and v, as JSON,
// into its results.json.
func writeTables(dir, md string, v any) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644)
}

// rerender reads a results.json and writes its tables and chart again, with
// the metric definitions of this version of the code.
func rerender(file, dir, doc string, stdout io.Writer) error {
	if srep, ok, err := loadScaleReport(file); err != nil {
		return err
	} else if ok {
		var md strings.Builder
		srep.writeMarkdown(&md)
		fmt.Fprint(stdout, md.String())
		return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644)
	}
	rep, err := loadReport(file)
	if err != nil {
		return err
	}
	rep.WriteMarkdown(stdout)
	if doc != "" {
		if err := rep.updateDoc(doc); err != nil {
			return err
		}
	}
	return writeResults(dir, rep)
}

// loadReport reads a results.json, with the metric definitions and ratios
// of this version of the code.
func loadReport(file string) (*Report, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i := range rep.Scenarios {
		s := &rep.Scenarios[i]
		for _, def := range scenarios {
			if def.Name == s.Name {
				// An optional metric the run did not measure is left out,
				// so that its tables render as they were written.
				s.Metrics = slices.DeleteFunc(slices.Clone(def.Metrics), func(m Metric) bool {
					return m.Optional && !slices.ContainsFunc(s.Rows, func(r Row) bool { _, ok := r.Samples[m.Key]; return ok })
				})
			}
		}
		for j := range s.Rows {
			s.Rows[j].Ratio = nil
		}
		s.ratios()
	}
	return &rep, nil
}
