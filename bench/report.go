package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is one run's results, written as results.json and results.md.
type Report struct {
	Note       string           `json:"note,omitempty"`
	Machine    Machine          `json:"machine"`
	Config     Config           `json:"config"`
	Contenders []ContenderInfo  `json:"contenders"`
	Scenarios  []ScenarioResult `json:"scenarios"`
	Elapsed    string           `json:"elapsed"`
}

// Machine describes where the run happened.
type Machine struct {
	Date         string `json:"date"`
	CPU          string `json:"cpu"`
	Cores        int    `json:"cores"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	OS           string `json:"os"`
	Go           string `json:"go"`
	RedisVersion string `json:"redis_version"`
	Redis        string `json:"redis_server"`
	LoadStart    string `json:"load_avg_start"`
	LoadEnd      string `json:"load_avg_end"`
	// Steal is the share of the CPUs' time over the run that the
	// hypervisor gave to other guests (see stealText).
	Steal string `json:"steal,omitempty"`
}

// ContenderInfo describes one contender of the run.
type ContenderInfo struct {
	Name   string `json:"name"`
	Lib    string `json:"lib"`
	Nodes  int    `json:"nodes"`
	Renews bool   `json:"renews"`
	Note   string `json:"note"`
}

// ScenarioResult holds one scenario's rows.
type ScenarioResult struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Reps  int    `json:"reps"`
	// Placement says where this process and the servers ran, for a
	// scenario that pins them (Scenario.OneCPU).
	Placement string `json:"placement,omitempty"`
	// Rounds is how many turns each contender took in a repetition, for a
	// scenario that interleaves them (Scenario.RunAll).
	Rounds int `json:"rounds,omitempty"`
	// Steal is the share of the CPUs' time over the scenario that the
	// hypervisor gave to other guests (see stealText).
	Steal string `json:"steal,omitempty"`
	// Redone is how many repetitions were run again because their
	// contenders' steal time lay too far apart (Config.StealRedo), and
	// StealSpread how far apart it lay, in points, in each repetition kept.
	Redone      int       `json:"redone,omitempty"`
	StealSpread []float64 `json:"steal_spread,omitempty"`
	Metrics     []Metric  `json:"metrics"`
	Rows        []Row     `json:"rows"`
}

// Row is one contender's figures in one scenario.
type Row struct {
	Contender string               `json:"contender"`
	Lib       string               `json:"lib"`
	Nodes     int                  `json:"nodes"`
	Median    map[string]float64   `json:"median"`
	Ratio     map[string]float64   `json:"ratio_to_best_peer,omitempty"`
	Samples   map[string][]float64 `json:"samples"`
	Errors    []string             `json:"errors,omitempty"`
}

// ratios sets each row's figures as a ratio to the best peer (a contender
// of another library than dlm) on the same number of nodes: taken within
// each repetition and their median when every row has a sample of every
// repetition (contenders alternate within a repetition, so the machine's
// drift between repetitions cancels), else the ratio of the medians.
func (s *ScenarioResult) ratios() {
	for _, m := range s.Metrics {
		if m.Reference {
			continue
		}
		better := func(v, b float64) bool { return m.Higher && v > b || !m.Higher && v < b }
		perRep := s.Reps > 0
		for _, r := range s.Rows {
			if _, ok := r.Median[m.Key]; ok && len(r.Samples[m.Key]) != s.Reps {
				perRep = false
			}
		}
		best := map[int]float64{}      // of the medians, per number of nodes
		bestRep := map[int][]float64{} // per repetition, per number of nodes
		for _, r := range s.Rows {
			v, ok := r.Median[m.Key]
			if !ok || r.Lib == "dlm" {
				continue
			}
			if b, seen := best[r.Nodes]; !seen || better(v, b) {
				best[r.Nodes] = v
			}
			if perRep {
				br, seen := bestRep[r.Nodes]
				if !seen {
					bestRep[r.Nodes] = slices.Clone(r.Samples[m.Key])
					continue
				}
				for k, x := range r.Samples[m.Key] {
					if better(x, br[k]) {
						br[k] = x
					}
				}
			}
		}
		for i := range s.Rows {
			r := &s.Rows[i]
			v, ok := r.Median[m.Key]
			b, seen := best[r.Nodes]
			if !ok || !seen || b == 0 {
				continue
			}
			if r.Ratio == nil {
				r.Ratio = map[string]float64{}
			}
			r.Ratio[m.Key] = v / b
			if perRep {
				if q, ok := repRatio(r.Samples[m.Key], bestRep[r.Nodes]); ok {
					r.Ratio[m.Key] = q
				}
			}
		}
	}
}

// repRatio is the median over repetitions of a[k]/b[k], false when a
// repetition has no ratio.
func repRatio(a, b []float64) (float64, bool) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, false
	}
	q := make([]float64, len(a))
	for k := range a {
		if b[k] == 0 {
			return 0, false
		}
		q[k] = a[k] / b[k]
	}
	return median(q), true
}

// Errors returns every error recorded in the report.
func (r *Report) Errors() []string {
	var errs []string
	for _, s := range r.Scenarios {
		for _, row := range s.Rows {
			for _, e := range row.Errors {
				errs = append(errs, s.Name+" / "+row.Contender+": "+e)
			}
		}
	}
	return errs
}

func describeMachine(ctx context.Context, addr string) Machine {
	m := Machine{
		Date:       time.Now().UTC().Format(time.RFC3339),
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		Go:         runtime.Version(),
		LoadStart:  loadAvg(),
	}
	if kv, err := info(ctx, addr); err == nil {
		m.RedisVersion = kv["redis_version"]
	}
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		m.Redis = strings.TrimSpace(string(out))
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// cpuTimes are the machine's CPU times, summed over its CPUs, in clock
// ticks (/proc/stat's first line): all of them, and steal, the time a
// virtual CPU was ready to run but the hypervisor ran another guest.
type cpuTimes struct{ total, steal uint64 }

// readCPUTimes reads /proc/stat; zero where there is none.
func readCPUTimes() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	return parseCPUTimes(string(b))
}

// parseCPUTimes reads the "cpu" line of /proc/stat's text: user, nice,
// system, idle, iowait, irq, softirq, steal (guest time is counted in user
// already).
func parseCPUTimes(stat string) cpuTimes {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += v
	}
	t.steal, _ = strconv.ParseUint(f[8], 10, 64)
	return t
}

// since is the CPUs' time from reading a to reading b; false when there
// are no readings.
func (b cpuTimes) since(a cpuTimes) (cpuTimes, bool) {
	if a.total == 0 || b.total < a.total || b.steal < a.steal {
		return cpuTimes{}, false
	}
	return cpuTimes{total: b.total - a.total, steal: b.steal - a.steal}, true
}

// stealPct is the share of the time d (a difference of readings) that was
// stolen, in percent; 0 when no clock tick passed.
func (d cpuTimes) stealPct() float64 {
	if d.total == 0 {
		return 0
	}
	return 100 * float64(d.steal) / float64(d.total)
}

// stealShare is the share of the CPUs' time between two readings that
// was stolen, in percent (0 when no clock tick passed); false when there
// are no readings.
func stealShare(a, b cpuTimes) (float64, bool) {
	d, ok := b.since(a)
	return d.stealPct(), ok
}

// stealSpreadText says how far apart the contenders' steal time lay in
// each repetition of s kept, and how many were run again for it.
func stealSpreadText(s ScenarioResult, c Config) string {
	parts := make([]string, len(s.StealSpread))
	for i, v := range s.StealSpread {
		parts[i] = strconv.FormatFloat(v, 'f', 1, 64)
	}
	redone := fmt.Sprintf("%d were", s.Redone)
	if s.Redone == 1 {
		redone = "1 was"
	}
	return fmt.Sprintf("Steal time of the contenders within a repetition lay %s points apart (in each repetition kept). "+
		"A repetition in which it lay more than %g points apart was run again, up to %d times, and the attempt with the least difference kept: %s run again.",
		strings.Join(parts, ", "), stealSpreadMax, c.StealRedo, redone)
}

// stealText is stealShare as text, such as "7.6%"; "" when it cannot tell.
func stealText(a, b cpuTimes) string {
	p, ok := stealShare(a, b)
	if !ok || b.total == a.total {
		return ""
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + "%"
}

// loadAvg is the 1, 5 and 15 minute load average, to show how busy the
// machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// num formats a figure with sensible precision and thousands separators.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		s := strconv.FormatInt(int64(math.Round(v)), 10)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// WriteMarkdown writes the tables: every figure with its ratio to the best
// peer on the same number of nodes.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "# dlm against other Go lock libraries\n\n")
	if r.Note != "" {
		fmt.Fprintf(w, "> %s\n\n", r.Note)
	}
	m := r.Machine
	fmt.Fprintf(w, "- Date: %s; run took %s\n", m.Date, r.Elapsed)
	fmt.Fprintf(w, "- CPU: %s, %d cores (GOMAXPROCS %d), %s\n", m.CPU, m.Cores, m.GOMAXPROCS, m.OS)
	fmt.Fprintf(w, "- Go: %s; Redis: %s\n", m.Go, m.RedisVersion)
	fmt.Fprintf(w, "- Load average at start / end: %s / %s\n", m.LoadStart, m.LoadEnd)
	if m.Steal != "" {
		fmt.Fprintf(w, "- Steal time over the run: %s of the CPUs' time went to other guests of the hypervisor (per scenario below); in a virtual machine, that is what ran beside the run\n", m.Steal)
	}
	c := r.Config
	fmt.Fprintf(w, "- Same for all: TTL %v, per-node timeout %v, retry pause %v doubling to %v (jittered), wait budget %v, pool %d connections per node\n",
		c.TTL, c.NodeTimeout, c.RetryMin, c.RetryMax, c.WaitBudget, c.PoolSize)
	if c.Bounded {
		fmt.Fprintf(w, "- Every call bounded by the per-node timeout (-bounded): dlm's single-instance strategy with WithTimeout(%v), bsm/redislock with a context of %v per call\n", c.NodeTimeout, c.NodeTimeout)
	}
	fmt.Fprintf(w, "- Each figure is the median of %d repetitions (silent-node: %d%s); contenders alternate within each repetition.\n", c.Reps, c.SilentReps, renewReps(c))
	fmt.Fprintf(w, "- In parentheses: the ratio to the best peer (another library) on the same number of nodes, taken within each repetition, median; ↑ higher is better, ↓ lower is better.\n\n")
	r.WriteSummary(w)
	for _, s := range r.Scenarios {
		fmt.Fprintf(w, "## %s\n\n%s\n\n", s.Title, scenarioDetail(s, c))
		if s.Placement != "" {
			fmt.Fprintf(w, "Placement: %s (a pair's latency is mostly wake-ups, and across the CPUs of a virtual machine a wake-up can cost several times one on the CPU that runs: "+
				"left to the scheduler, which one a contender gets changes between repetitions).\n\n", s.Placement)
		}
		if s.Steal != "" {
			fmt.Fprintf(w, "Steal time: %s of the CPUs' time over this scenario went to other guests of the hypervisor.\n\n", s.Steal)
		}
		if len(s.StealSpread) > 0 {
			fmt.Fprintf(w, "%s\n\n", stealSpreadText(s, c))
		}
		if s.Rounds > 0 {
			fmt.Fprintf(w, "Interleaved: in each repetition the contenders take turns, %d each, so that a change in the machine's speed falls on all alike.\n\n", s.Rounds)
		}
		fmt.Fprintf(w, "| Contender | nodes |")
		for _, mt := range s.Metrics {
			arrow := " ↓"
			switch {
			case mt.Reference:
				arrow = ""
			case mt.Higher:
				arrow = " ↑"
			}
			unit := ""
			if mt.Unit != "" {
				unit = " (" + mt.Unit + ")"
			}
			fmt.Fprintf(w, " %s%s%s |", mt.Label, unit, arrow)
		}
		fmt.Fprintf(w, "\n| --- | ---: |%s\n", strings.Repeat(" ---: |", len(s.Metrics)))
		var errs []string
		for _, row := range s.Rows {
			fmt.Fprintf(w, "| %s | %d |", row.Contender, row.Nodes)
			for _, mt := range s.Metrics {
				v, ok := row.Median[mt.Key]
				if !ok {
					fmt.Fprintf(w, " – |")
					continue
				}
				if q, ok := row.Ratio[mt.Key]; ok {
					fmt.Fprintf(w, " %s (%.2f×) |", num(v), q)
				} else {
					fmt.Fprintf(w, " %s |", num(v))
				}
			}
			fmt.Fprintln(w)
			for _, e := range row.Errors {
				errs = append(errs, row.Contender+": "+e)
			}
		}
		if s.Name == "distinct" && hasMetric(s.Metrics, "failed_per_100k") {
			fmt.Fprintf(w, "\n%s\n", pooledFailures(s, c))
		}
		if len(errs) > 0 {
			fmt.Fprintf(w, "\nErrors:\n\n")
			for _, e := range errs {
				fmt.Fprintf(w, "- %s\n", e)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "## Contenders\n\n| Contender | library | nodes | configuration |\n| --- | --- | ---: | --- |\n")
	for _, ci := range r.Contenders {
		fmt.Fprintf(w, "| %s | %s | %d | %s |\n", ci.Name, ci.Lib, ci.Nodes, ci.Note)
	}
}

// scenarioDetail says what a scenario does, with its run's sizes.
func scenarioDetail(s ScenarioResult, c Config) string {
	switch s.Name {
	case "serial":
		return fmt.Sprintf("One goroutine takes and releases one key %d times (TryLock, then Unlock). "+
			"Latency of the pair; allocations per pair counted with runtime.MemStats over the whole process.", c.SerialOps)
	case "distinct":
		loop := c.DistinctDur.String()
		if s.Rounds > 0 {
			loop = fmt.Sprintf("%v in all, in %d turns of %v", c.DistinctDur, s.Rounds, c.DistinctDur/time.Duration(s.Rounds))
		}
		return fmt.Sprintf("%d goroutines, each on its own key, TryLock+Unlock in a loop for %s. "+
			"A call that fails (say, a node call timing out on a loaded machine) is counted and the loop goes on. "+
			"Client CPU/op: this process's CPU time (getrusage) over the loop, per pair. "+
			"Server CPU/op: the servers' used_cpu_sys+used_cpu_user over the loop, summed over the nodes, per lock+unlock pair; "+
			"server cmds/op: total_commands_processed likewise (commands run inside scripts count).", c.DistinctG, loop)
	case "contended":
		return fmt.Sprintf("%d goroutines on one key for %v, each Lock (waiting), hold %v, Unlock. "+
			"Wait = time in Lock (a wait still pending at the end counts with its length so far, so starvation shows). Spread = coefficient of variation of acquisitions per goroutine (0 = perfectly even). "+
			"An in-process counter checks that no two goroutines ever hold the lock at once.", c.ContendedG, c.ContendedDur, c.ContendedHold)
	case "handoff":
		rounds := fmt.Sprint(c.HandoffRounds, " rounds")
		if s.Rounds > 0 {
			rounds += ", the contenders' in turn"
		}
		return fmt.Sprintf("%s: a holder keeps the key %v–%v while %d goroutines wait in Lock; "+
			"figure = time from the holder's Unlock call to the first waiter's acquisition. "+
			"PING = one round trip to the contender's (first) server on a connection of its own, after as long an idle as a round's hold, "+
			"over the same path: the machine's round trip after an idle, against which a hand-off is measured.", rounds, c.HandoffHoldMin, c.HandoffHoldMax, c.HandoffWaiters)
	case "silent":
		return fmt.Sprintf("The fifth node is stopped with SIGSTOP (keeps its connections, answers nothing). "+
			"%d serial TryLock+Unlock pairs on fresh keys, each call with a %v caller deadline. "+
			"Five-node contenders only.", c.SilentOps, c.OpTimeout)
	case "renewal":
		return fmt.Sprintf("%d locks with a %v TTL are taken and held for %v while the library renews them; "+
			"CPU of this process (getrusage) and of redis-server (INFO), server commands per second, heap and goroutines per held lock, "+
			"and how many locks were lost. Only contenders that renew by themselves.", c.RenewLocks, c.RenewTTL, c.RenewWindow)
	}
	return ""
}

// renewReps describes the renewal scenario's own repetition count; results
// written before it had one used Reps.
func renewReps(c Config) string {
	if c.RenewReps == 0 {
		return ""
	}
	return fmt.Sprintf(", renewal: %d", c.RenewReps)
}

// pooledFailures says, for each contender of the distinct scenario, how
// many pairs failed over all its repetitions, per 100k: a failure comes
// in bursts (a stall of the machine longer than the per-node timeout), so
// that the median of the repetitions is mostly 0.
func pooledFailures(s ScenarioResult, c Config) string {
	var b strings.Builder
	b.WriteString("Failed pairs over all repetitions, per 100k (a pair's rate times the scenario's duration each repetition, summed; a repetition in which most calls failed, recorded as an error, counts too):")
	for i, r := range s.Rows {
		var failed, pairs float64
		for _, f := range r.Samples["failed"] {
			failed += f
		}
		for _, o := range r.Samples["ops_s"] {
			pairs += o * c.DistinctDur.Seconds()
		}
		for _, e := range r.Errors {
			var rep, f, all int
			if _, err := fmt.Sscanf(e, "rep %d: %d of %d calls failed", &rep, &f, &all); err == nil {
				failed += float64(f)
				pairs += float64(all - f)
			}
		}
		sep := ";"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s %.0f of %.0f (%.1f)", sep, r.Contender, failed, pairs+failed, 1e5*failed/max(pairs+failed, 1))
	}
	b.WriteString(".")
	return b.String()
}
