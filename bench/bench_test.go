package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/internal/redistest"
)

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmoke runs every contender through every scenario with tiny counts on
// real servers and checks that each produced every figure, without errors
// (a second holder of a lock is one), and that no dlm contender failed a
// call or lost a renewed lock.
func TestSmoke(t *testing.T) {
	srv := redistest.StartN(t, 6)
	byAddr := map[string]*redistest.Server{}
	for _, s := range srv {
		byAddr[s.Addr] = s
	}
	top := Topology{
		Single: []string{srv[0].Addr},
		Multi:  []string{srv[1].Addr, srv[2].Addr, srv[3].Addr, srv[4].Addr, srv[5].Addr},
		// run calls these from the test's goroutine.
		Freeze: func(a string) error { byAddr[a].Freeze(t); return nil },
		Thaw:   func(a string) error { byAddr[a].Thaw(t); return nil },
	}
	if canPin() {
		top.Pin = (&servers{byAddr: byAddr}).Pin
	}
	rep, err := run(context.Background(), smokeConfig(), top, Options{Note: "smoke"}, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep.Errors() {
		t.Error(e)
	}
	if len(rep.Scenarios) != len(scenarios) {
		t.Errorf("%d scenarios ran, want %d", len(rep.Scenarios), len(scenarios))
	}
	for _, s := range rep.Scenarios {
		def := scenarioByName(s.Name)
		want := 0
		for _, c := range contenders {
			if c.joins(def, top) {
				want++
			}
		}
		if len(s.Rows) != want {
			t.Errorf("%s: %d rows, want %d", s.Name, len(s.Rows), want)
		}
		for _, row := range s.Rows {
			for _, m := range s.Metrics {
				if m.Key == "steal_pct" && readCPUTimes() == (cpuTimes{}) {
					continue // no /proc/stat
				}
				if _, ok := row.Median[m.Key]; !ok && len(row.Errors) == 0 {
					t.Errorf("%s / %s: no %s", s.Name, row.Contender, m.Key)
				}
			}
			// dlm must not fail a call in the smoke run: its per-node timeout
			// there is generous, so a failure is a bug, not load. (Peers may
			// give up on a node error; their failures are figures.)
			if row.Lib == "dlm" && row.Median["failed"] != 0 {
				t.Errorf("%s / %s: %v failed calls", s.Name, row.Contender, row.Median["failed"])
			}
			if s.Name == "renewal" && row.Median["lost"] != 0 {
				t.Errorf("renewal / %s: %v locks lost although the library renews", row.Contender, row.Median["lost"])
			}
			if s.Name == "serial" && row.Median["p50_us"] <= 0 {
				t.Errorf("serial / %s: p50 %v", row.Contender, row.Median["p50_us"])
			}
		}
		if hasMetric(s.Metrics, "steal_pct") && readCPUTimes() != (cpuTimes{}) &&
			(len(s.StealSpread) != s.Reps || s.Redone > s.Reps*smokeConfig().StealRedo) {
			t.Errorf("%s: steal spread %v over %d repetitions, %d run again", s.Name, s.StealSpread, s.Reps, s.Redone)
		}
		if s.Name == "serial" && top.Pin != nil && !strings.Contains(s.Placement, "pinned to one CPU") {
			t.Errorf("serial ran unpinned: %q", s.Placement)
		}
	}

	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	for _, c := range contenders {
		if !strings.Contains(md.String(), "| "+c.Name+" |") {
			t.Errorf("markdown has no row for %s", c.Name)
		}
	}
	var svg bytes.Buffer
	if err := rep.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	checkXML(t, svg.Bytes())
}

func scenarioByName(name string) Scenario {
	for _, s := range scenarios {
		if s.Name == name {
			return s
		}
	}
	return Scenario{}
}

func checkXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
}

// TestCommand runs the command as a user would, with servers it starts
// itself, and checks the files it writes.
func TestCommand(t *testing.T) {
	redistest.Binary(t, "redis-server") // skips or fails as the other tests do
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := mainErr([]string{"-smoke", "-out", dir, "-only", `^(dlm single/goredis|redsync/redigo x5)$`,
		"-scenarios", "serial,silent", "-note", "test"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "silent    rep 1/1  redsync/redigo x5") {
		t.Errorf("no progress line for the silent scenario on stderr:\n%s", stderr.String())
	}
	var rep Report
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Note != "test" || rep.Machine.Cores == 0 || rep.Machine.Go == "" || rep.Machine.RedisVersion == "" {
		t.Errorf("machine description incomplete: note %q, %+v", rep.Note, rep.Machine)
	}
	if _, err := os.Stat("/proc/stat"); err == nil {
		if rep.Machine.Steal == "" || rep.Scenarios[0].Steal == "" {
			t.Errorf("no steal time for the run (%q) or its first scenario (%q)", rep.Machine.Steal, rep.Scenarios[0].Steal)
		}
		if !strings.Contains(stdout.String(), "Steal time over the run: ") {
			t.Error("results.md does not give the run's steal time")
		}
	}
	if want := smokeConfig(); rep.Config != want {
		t.Errorf("config read back from results.json = %+v, want %+v", rep.Config, want)
	}
	if len(rep.Scenarios) != 2 || len(rep.Scenarios[0].Rows) != 2 || len(rep.Scenarios[1].Rows) != 1 {
		t.Errorf("results.json: want serial with 2 rows and silent with 1, got %+v", rep.Scenarios)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSuffix(md, []byte("\n![chart](chart.svg)\n")), stdout.Bytes()) {
		t.Error("results.md differs from the tables on stdout")
	}
	svg, err := os.ReadFile(filepath.Join(dir, "chart.svg"))
	if err != nil {
		t.Fatal(err)
	}
	checkXML(t, svg)

	// -render writes the same tables again from results.json.
	var again bytes.Buffer
	if err := mainErr([]string{"-render", filepath.Join(dir, "results.json"), "-out", t.TempDir()}, &again, io.Discard); err != nil {
		t.Fatal(err)
	}
	if again.String() != stdout.String() {
		t.Errorf("-render wrote other tables:\n%s\nwant:\n%s", again.String(), stdout.String())
	}

	if err := mainErr([]string{"-scenarios", "nope"}, io.Discard, io.Discard); err == nil {
		t.Error("an unknown scenario was accepted")
	}
}

// turnLocker grants every request after a millisecond (of virtual time:
// the test runs in a synctest bubble), and notes in turns which locker
// made each run of consecutive calls.
type turnLocker struct {
	brokenLocker
	name  string
	turns *turnLog
}

type turnLog struct {
	mu    sync.Mutex
	names []string
}

// threeContenders returns contenders named a, b and c, with the lockers
// newLocker makes, which log their turns in the log returned.
func threeContenders(newLocker func(name string, turns *turnLog) Locker) ([]*entry, *turnLog) {
	turns := &turnLog{}
	var in []*entry
	for i, name := range []string{"a", "b", "c"} {
		in = append(in, &entry{Contender: Contender{Name: name}, idx: i, locker: newLocker(name, turns)})
	}
	return in, turns
}

// check checks that three contenders took their turns in order: the
// warm-up, then rounds rounds.
func (l *turnLog) check(t *testing.T, rounds int) {
	t.Helper()
	if got, want := strings.Join(l.names, ""), strings.Repeat("abc", 1+rounds); got != want {
		t.Errorf("turns %q, want %q", got, want)
	}
}

func (l turnLocker) TryLock(ctx context.Context, key string) (Held, error) {
	l.turns.mu.Lock()
	if n := len(l.turns.names); n == 0 || l.turns.names[n-1] != l.name {
		l.turns.names = append(l.turns.names, l.name)
	}
	l.turns.mu.Unlock()
	time.Sleep(time.Millisecond)
	return nopHeld{}, nil
}

// TestDistinctInterleaves: the contenders of a repetition of the distinct
// scenario take distinctRounds turns each, in order, so that a drift of
// the machine's speed falls on all alike; each gets its figures. The
// lockers have no server (no addresses: no server figures to read), and
// the turns run in virtual time.
func TestDistinctInterleaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &runner{cfg: smokeConfig(), progress: io.Discard}
		in, turns := threeContenders(func(name string, turns *turnLog) Locker { return turnLocker{name: name, turns: turns} })
		vals, errs := runDistinct(context.Background(), r, in, 0)
		turns.check(t, distinctRounds)
		for j, e := range in {
			if errs[j] != nil {
				t.Errorf("%s: %v", e.Name, errs[j])
				continue
			}
			// 8 goroutines, each a pair per millisecond
			if got, want := vals[j]["ops_s"], 8000.0; got < 0.9*want || got > want {
				t.Errorf("%s: ops_s %v, want about %v", e.Name, got, want)
			}
			if _, ok := vals[j]["steal_pct"]; !ok && readCPUTimes() != (cpuTimes{}) {
				t.Errorf("%s: no steal_pct", e.Name)
			}
		}
	})
}

// memLocker is a lock in memory, without a server, that logs the turns
// of its TryLock callers as turnLocker does; Lock waits for the holder's
// Unlock.
type memLocker struct {
	name  string
	turns *turnLog
	mu    sync.Mutex
	held  map[string]chan struct{} // closed on Unlock
}

func (l *memLocker) take(key string) (Held, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.held[key]; ok {
		return nil, ch
	}
	if l.held == nil {
		l.held = map[string]chan struct{}{}
	}
	l.held[key] = make(chan struct{})
	return memHeld{l, key}, nil
}

func (l *memLocker) TryLock(_ context.Context, key string) (Held, error) {
	l.turns.mu.Lock()
	if n := len(l.turns.names); n == 0 || l.turns.names[n-1] != l.name {
		l.turns.names = append(l.turns.names, l.name)
	}
	l.turns.mu.Unlock()
	if h, _ := l.take(key); h != nil {
		return h, nil
	}
	return nil, errBusy
}

func (l *memLocker) Lock(ctx context.Context, key string) (Held, error) {
	for {
		h, ch := l.take(key)
		if h != nil {
			return h, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l *memLocker) Close() error { return nil }

type memHeld struct {
	l   *memLocker
	key string
}

func (h memHeld) Unlock(context.Context) error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	close(h.l.held[h.key])
	delete(h.l.held, h.key)
	return nil
}

// TestHandoffInterleaves: the contenders of a repetition of the hand-off
// scenario take their rounds in turn, each gets a sample from every
// round, and the figures are the lockers' own (in virtual time, a waiter
// woken by the release takes the lock at the instant of the release).
func TestHandoffInterleaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &runner{cfg: smokeConfig(), progress: io.Discard}
		in, turns := threeContenders(func(name string, turns *turnLog) Locker { return &memLocker{name: name, turns: turns} })
		vals, errs := runHandoff(context.Background(), r, in, 0)
		turns.check(t, r.cfg.HandoffRounds)
		for j, e := range in {
			if errs[j] != nil {
				t.Errorf("%s: %v", e.Name, errs[j])
				continue
			}
			if vals[j]["failed"] != 0 || vals[j]["p50_ms"] != 0 {
				t.Errorf("%s: %v, want no failed round and hand-offs at the release", e.Name, vals[j])
			}
		}
	})
}

// brokenLocker grants every request: a lock without mutual exclusion.
type brokenLocker struct{}

type nopHeld struct{}

func (nopHeld) Unlock(context.Context) error { return nil }

func (brokenLocker) TryLock(context.Context, string) (Held, error) { return nopHeld{}, nil }
func (brokenLocker) Lock(context.Context, string) (Held, error)    { return nopHeld{}, nil }
func (brokenLocker) Close() error                                  { return nil }

// TestContendedCatchesBrokenLock: the exclusion check of the contended and
// hand-off scenarios must fail a lock that lets two holders in.
func TestContendedCatchesBrokenLock(t *testing.T) {
	cfg := smokeConfig()
	cfg.ContendedHold = 5 * time.Millisecond
	r := &runner{cfg: cfg, progress: io.Discard}
	e := &entry{Contender: Contender{Name: "broken"}, locker: brokenLocker{}}
	if _, err := runContended(context.Background(), r, e, 0); err == nil || !strings.Contains(err.Error(), "mutual exclusion violated") {
		t.Errorf("contended: err = %v, want a mutual exclusion violation", err)
	}
	if _, errs := runHandoff(context.Background(), r, []*entry{e}, 0); errs[0] == nil || !strings.Contains(errs[0].Error(), "mutual exclusion violated") {
		t.Errorf("handoff: err = %v, want a mutual exclusion violation", errs[0])
	}
}

func TestBackoff(t *testing.T) {
	e := Env{RetryMin: 4 * time.Millisecond, RetryMax: 32 * time.Millisecond}
	b := newBackoff(e)
	caps := []time.Duration{4, 8, 16, 32, 32, 32}
	for i, c := range caps {
		c *= time.Millisecond
		if d := b.Next(); d < c/2 || d > c {
			t.Errorf("pause %d = %v, want in [%v, %v]", i+1, d, c/2, c)
		}
		if d := nthBackoff(e, i+1); d < c/2 || d > c {
			t.Errorf("nthBackoff(%d) = %v, want in [%v, %v]", i+1, d, c/2, c)
		}
	}
}

func TestStats(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if p := pct(d, 50); p != 5 {
		t.Errorf("p50 = %v, want 5", p)
	}
	if p := pct(d, 99); p != 10 {
		t.Errorf("p99 = %v, want 10", p)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
	if c := cv([]int{5, 5, 5}); c != 0 {
		t.Errorf("cv of equal counts = %v", c)
	}
	if c := cv([]int{0, 10}); c != 1 {
		t.Errorf("cv{0,10} = %v, want 1", c)
	}
	for _, tc := range []struct {
		v    string
		want bool
	}{{"7.0.5", true}, {"7.0.15", true}, {"7.2.0", true}, {"6.2.14", false}, {"7.0.4", false}, {"", false}} {
		if got := versionAtLeast(tc.v, 7, 0, 5); got != tc.want {
			t.Errorf("versionAtLeast(%q) = %v", tc.v, got)
		}
	}
	if s := num(1234567.4); s != "1,234,567" {
		t.Errorf("num = %q", s)
	}
}

func TestRatios(t *testing.T) {
	s := ScenarioResult{
		Metrics: []Metric{{Key: "lat"}, {Key: "ops", Higher: true}, {Key: "ping", Reference: true}},
		Rows: []Row{
			{Contender: "dlm", Lib: "dlm", Nodes: 1, Median: map[string]float64{"lat": 50, "ops": 300, "ping": 1}},
			{Contender: "a", Lib: "a", Nodes: 1, Median: map[string]float64{"lat": 100, "ops": 200}},
			{Contender: "b", Lib: "b", Nodes: 1, Median: map[string]float64{"lat": 200, "ops": 100}},
			{Contender: "c5", Lib: "c", Nodes: 5, Median: map[string]float64{"lat": 1000, "ops": 10}},
		},
	}
	s.ratios()
	if _, ok := s.Rows[0].Ratio["ping"]; ok {
		t.Errorf("a reference figure got a ratio")
	}
	want := []map[string]float64{{"lat": 0.5, "ops": 1.5}, {"lat": 1, "ops": 1}, {"lat": 2, "ops": 0.5}, {"lat": 1, "ops": 1}}
	for i, w := range want {
		for k, v := range w {
			if got := s.Rows[i].Ratio[k]; got != v {
				t.Errorf("row %s %s ratio = %v, want %v", s.Rows[i].Contender, k, got, v)
			}
		}
	}
}

// TestRatiosWithinRepetitions: with a sample of every repetition in every
// row, a ratio is the median of the ratios within each repetition, against
// each repetition's best peer: a machine that slowed down in one
// repetition slowed every contender of it.
func TestRatiosWithinRepetitions(t *testing.T) {
	s := ScenarioResult{
		Reps:    3,
		Metrics: []Metric{{Key: "ops", Higher: true}},
		Rows: []Row{
			{Contender: "dlm", Lib: "dlm", Nodes: 1, Samples: map[string][]float64{"ops": {100, 50, 90}}},
			{Contender: "a", Lib: "a", Nodes: 1, Samples: map[string][]float64{"ops": {100, 25, 100}}},
			{Contender: "b", Lib: "b", Nodes: 1, Samples: map[string][]float64{"ops": {50, 40, 120}}},
		},
	}
	for i := range s.Rows {
		s.Rows[i].Median = map[string]float64{"ops": median(s.Rows[i].Samples["ops"])}
	}
	s.ratios()
	// Within repetitions: 100/100, 50/40, 90/120 → median 1. Of the medians: 90/100.
	if got := s.Rows[0].Ratio["ops"]; got != 1 {
		t.Errorf("ratio = %v, want 1 (median of 1, 1.25, 0.75)", got)
	}
	s.Rows[2].Samples["ops"] = s.Rows[2].Samples["ops"][:2] // a failed repetition
	s.ratios()
	if got := s.Rows[0].Ratio["ops"]; got != 0.9 {
		t.Errorf("ratio with a repetition missing = %v, want 0.9 (of the medians)", got)
	}
}

// TestRegistry: dlm runs single and Redlock over every driver, with
// auto-renewing variants of single on each driver and of Redlock over
// go-redis, and names are unique (rows are matched by name).
func TestRegistry(t *testing.T) {
	byName := map[string]Contender{}
	for _, c := range contenders {
		if _, dup := byName[c.Name]; dup {
			t.Errorf("two contenders named %q", c.Name)
		}
		byName[c.Name] = c
	}
	want := map[string]int{}
	for _, d := range []string{"goredis", "redigo", "rueidis", "valkeygo"} {
		want["dlm single/"+d] = 1
		want["dlm single/"+d+" +renew"] = 1
		want["dlm redlock/"+d] = 5
	}
	want["dlm redlock/goredis +renew"] = 5
	for name, nodes := range want {
		c, ok := byName[name]
		switch {
		case !ok:
			t.Errorf("no contender %q", name)
		case c.Lib != "dlm" || c.Nodes != nodes:
			t.Errorf("%s: lib %q, %d nodes; want dlm, %d", name, c.Lib, c.Nodes, nodes)
		case strings.HasSuffix(name, "+renew") != c.Renews:
			t.Errorf("%s: Renews = %v", name, c.Renews)
		}
	}
}

// TestInstructions counts server instructions per pair under callgrind for
// two contenders, and checks the table: a count for each, dlm's against
// the peer's; and that the run leaves no vgdb pipe in the temporary
// directory (they once stayed there, three a run).
func TestInstructions(t *testing.T) {
	redistest.Binary(t, "redis-server")
	redistest.Binary(t, "valgrind")
	pipes := func() map[string]bool {
		names, _ := filepath.Glob(filepath.Join(os.TempDir(), "vgdb-pipe-*"))
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	before := pipes()
	var stdout, stderr bytes.Buffer
	err := mainErr([]string{"-instructions", "256", "-instructions-goroutines", "8",
		"-only", `^(dlm single/goredis|redsync/goredis)$`}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	for p := range pipes() {
		if !before[p] {
			t.Errorf("the run left %s", p)
		}
	}
	rows := map[string]float64{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.Contains(cells[2], "×") {
			continue
		}
		n, _, _ := strings.Cut(strings.TrimSpace(cells[2]), " ")
		v, err := strconv.ParseFloat(strings.ReplaceAll(n, ",", ""), 64)
		if err != nil {
			t.Fatalf("row %q: %v", line, err)
		}
		rows[strings.TrimSpace(cells[1])] = v
	}
	t.Logf("\n%s", stdout.String())
	for _, name := range []string{"dlm single/goredis", "redsync/goredis"} {
		// A lock+unlock pair takes the server thousands of instructions;
		// a few hundred would mean the counts missed the pairs.
		if rows[name] < 5000 {
			t.Errorf("%s: %v instructions per pair", name, rows[name])
		}
	}
}

// TestCommittedResults: the committed tables, and the summary in
// docs/performance.md, are what this version of the code renders from the
// committed results.json files, so that no figure or ratio in them is
// stale. After a run, or a change to how results are shown:
// `cd bench && go run . -render results/results.json -doc ../docs/performance.md`
// (and -render for each results/*/results.json).
func TestCommittedResults(t *testing.T) {
	files, err := filepath.Glob("results/*/results.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append(files, "results/results.json") {
		if srep, ok, err := loadScaleReport(file); err != nil {
			t.Fatal(err)
		} else if ok {
			var md strings.Builder
			srep.writeMarkdown(&md)
			if got, err := os.ReadFile(filepath.Join(filepath.Dir(file), "results.md")); err != nil || string(got) != md.String() {
				t.Errorf("%s is not what %s renders (%v): go run . -render %s", filepath.Join(filepath.Dir(file), "results.md"), file, err, file)
			}
			continue
		}
		rep, err := loadReport(file)
		if err != nil {
			t.Fatal(err)
		}
		var md strings.Builder
		rep.WriteMarkdown(&md)
		md.WriteString("\n![chart](chart.svg)\n")
		got, err := os.ReadFile(filepath.Join(filepath.Dir(file), "results.md"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != md.String() {
			t.Errorf("%s is not what %s renders: go run . -render %s", filepath.Join(filepath.Dir(file), "results.md"), file, file)
		}
		if file != "results/results.json" {
			continue
		}
		doc, err := os.ReadFile("../docs/performance.md")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), rep.docSummary()) {
			t.Errorf("docs/performance.md does not carry the summary of %s: go run . -render %s -doc ../docs/performance.md", file, file)
		}
	}
}

// The steal time is read from /proc/stat's cpu line, as a share of all the
// CPUs' time between two readings.
func TestSteal(t *testing.T) {
	a := parseCPUTimes("cpu  100 5 50 800 10 1 2 32 7 0\ncpu0 50 2 25 400 5 0 1 16 0 0\n")
	if want := (cpuTimes{total: 1000, steal: 32}); a != want {
		t.Fatalf("parseCPUTimes = %+v, want %+v", a, want)
	}
	b := cpuTimes{total: 1200, steal: 82}
	if got := stealText(a, b); got != "25.0%" {
		t.Errorf("stealText = %q, want 25.0%%", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x 9"} {
		if got := parseCPUTimes(bad); got != (cpuTimes{}) {
			t.Errorf("parseCPUTimes(%q) = %+v, want zero", bad, got)
		}
	}
	if got := stealText(cpuTimes{}, cpuTimes{}); got != "" {
		t.Errorf("stealText of no readings = %q, want empty", got)
	}
	if p, ok := stealShare(a, a); !ok || p != 0 {
		t.Errorf("stealShare with no tick between = %v, %v; want 0, true", p, ok)
	}
	if got := stealText(a, a); got != "" {
		t.Errorf("stealText with no tick between = %q, want empty", got)
	}
}

// A repetition's steal spread is taken over the contenders that reported
// their steal time and did not fail; with fewer than two there is none.
func TestStealSpread(t *testing.T) {
	at := func(p float64) attempt { return attempt{vals: map[string]float64{"steal_pct": p}} }
	failed := attempt{vals: map[string]float64{"steal_pct": 40}, err: errors.New("x")}
	unknown := attempt{vals: map[string]float64{"ops_s": 1}}
	for _, c := range []struct {
		got  []attempt
		want float64
		ok   bool
	}{
		{[]attempt{at(2), at(9.5), at(4)}, 7.5, true},
		{[]attempt{at(3), failed, unknown, at(3)}, 0, true},
		{[]attempt{at(3), failed, unknown}, 0, false},
		{nil, 0, false},
	} {
		got, ok := stealSpread(c.got)
		if got != c.want || ok != c.ok {
			t.Errorf("stealSpread(%v) = %v, %v; want %v, %v", c.got, got, ok, c.want, c.ok)
		}
	}
}
