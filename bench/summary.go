package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// WriteSummary writes the headline comparisons of a run: each dlm
// contender (single and Redlock, per driver) against the best peer on the
// same number of nodes and against the best peer on the same client
// library, for the figures the library aims at. Ratios are taken within
// each repetition (median), as in the tables.
func (r *Report) WriteSummary(w io.Writer) {
	rows := r.summaryRows()
	if rows == "" {
		return
	}
	fmt.Fprintf(w, "## Summary\n\n")
	r.writeSummaryTable(w, rows)
}

// summaryRows returns the summary table's rows.
func (r *Report) summaryRows() string {
	type line struct {
		scenario, key, what string
		nodes               int
		sameClient          bool
	}
	lines := []line{
		{"distinct", "ops_s", "64 goroutines, distinct keys: pairs/s ↑", 1, false},
		{"distinct", "ops_s", "", 1, true},
		{"distinct", "client_us_op", "same: client CPU per pair (µs) ↓", 1, false},
		{"distinct", "server_us_op", "same: server CPU per pair (µs) ↓", 1, false},
		{"serial", "p50_us", "serial pair p50 (µs) ↓", 1, true},
		{"serial", "p99_us", "serial pair p99 (µs) ↓", 1, true},
		{"serial", "allocs_op", "serial pair allocations ↓", 1, false},
		{"distinct", "ops_s", "64 goroutines, distinct keys: pairs/s ↑", 5, false},
		{"handoff", "p50_ms", "hand-off to a waiter p50 (ms) ↓", 1, false},
		{"handoff", "p50_ms", "hand-off to a waiter p50 (ms) ↓", 5, false},
	}
	var b strings.Builder
	for _, l := range lines {
		s := r.scenario(l.scenario)
		if s == nil {
			continue
		}
		m, ok := s.metric(l.key)
		if !ok {
			continue
		}
		for _, row := range s.Rows {
			if row.Lib != "dlm" || row.Nodes != l.nodes || !headline(row.Contender) {
				continue
			}
			v, ok := row.Median[l.key]
			if !ok {
				continue
			}
			peers := s.peers(l.nodes, "")
			what := l.what
			if l.sameClient {
				peers = s.peers(l.nodes, clientOf(row.Contender))
				if what == "" {
					what = "same, against the same client"
				} else {
					what += ", against the same client"
				}
			}
			best, q, ok := s.against(row, peers, m)
			if !ok {
				continue
			}
			ratio := fmt.Sprintf("%.2f×", q)
			if l.key == "allocs_op" {
				ratio = fmt.Sprintf("%+.0f", v-best.Median[l.key])
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", what, row.Contender, num(v), best.Contender, num(best.Median[l.key]), ratio)
		}
	}
	return b.String()
}

func (r *Report) writeSummaryTable(w io.Writer, rows string) {
	fmt.Fprintf(w, "dlm's single-instance and Redlock contenders against the best peer on the same number of nodes (or on the same client library, where it says so). ")
	fmt.Fprintf(w, "Ratio: dlm's figure over the best peer's, taken within each repetition, median (allocations: the difference of the medians). ")
	fmt.Fprintf(w, "The peer named is the best by median.\n\n")
	fmt.Fprintf(w, "| Figure | dlm | value | best peer | value | ratio |\n| --- | --- | ---: | --- | ---: | ---: |\n")
	fmt.Fprint(w, rows)
	fmt.Fprintln(w)
}

// headline reports whether a dlm contender is a plain lock (not a family
// primitive, not renewing).
func headline(name string) bool {
	return (strings.HasPrefix(name, "dlm single/") || strings.HasPrefix(name, "dlm redlock/")) && !strings.Contains(name, "+")
}

// clientOf names the Redis client library a contender runs on.
func clientOf(name string) string {
	switch {
	case strings.Contains(name, "goredis"), strings.HasPrefix(name, "bsm/"):
		return "go-redis"
	case strings.Contains(name, "redigo"):
		return "redigo"
	case strings.Contains(name, "valkeygo"):
		return "valkey-go"
	case strings.Contains(name, "rueidis"):
		return "rueidis"
	}
	return ""
}

func (r *Report) scenario(name string) *ScenarioResult {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name == name {
			return &r.Scenarios[i]
		}
	}
	return nil
}

func (s *ScenarioResult) metric(key string) (Metric, bool) {
	i := slices.IndexFunc(s.Metrics, func(m Metric) bool { return m.Key == key })
	if i < 0 {
		return Metric{}, false
	}
	return s.Metrics[i], true
}

// peers returns the rows of other libraries than dlm on nodes nodes, on
// client when it is not empty.
func (s *ScenarioResult) peers(nodes int, client string) []Row {
	var out []Row
	for _, r := range s.Rows {
		if r.Lib != "dlm" && r.Nodes == nodes && (client == "" || clientOf(r.Contender) == client) {
			out = append(out, r)
		}
	}
	return out
}

// against returns the best of peers for m by median, and row's ratio to
// the best peer taken within each repetition (median), or of the medians
// when the repetitions do not line up.
func (s *ScenarioResult) against(row Row, peers []Row, m Metric) (Row, float64, bool) {
	better := func(v, b float64) bool { return m.Higher && v > b || !m.Higher && v < b }
	var best Row
	found := false
	perRep := len(row.Samples[m.Key]) == s.Reps && s.Reps > 0
	var bestRep []float64
	for _, p := range peers {
		v, ok := p.Median[m.Key]
		if !ok {
			continue
		}
		if !found || better(v, best.Median[m.Key]) {
			best = p
		}
		found = true
		ps := p.Samples[m.Key]
		if len(ps) != s.Reps {
			perRep = false
			continue
		}
		if bestRep == nil {
			bestRep = slices.Clone(ps)
			continue
		}
		for k, x := range ps {
			if better(x, bestRep[k]) {
				bestRep[k] = x
			}
		}
	}
	if !found || best.Median[m.Key] == 0 {
		return Row{}, 0, false
	}
	if perRep {
		if q, ok := repRatio(row.Samples[m.Key], bestRep); ok {
			return best, q, true
		}
	}
	return best, row.Median[m.Key] / best.Median[m.Key], true
}

// The summary's copy in a document lies between these lines.
const (
	docBegin = "<!-- bench summary: written by `cd bench && go run . -render results/results.json -doc ../docs/performance.md` -->\n"
	docEnd   = "<!-- end of bench summary -->\n"
)

// docSummary is the summary as a document carries it: the run's machine
// and the table.
func (r *Report) docSummary() string {
	var b strings.Builder
	m := r.Machine
	b.WriteString(docBegin)
	steal := ""
	if m.Steal != "" {
		steal = ", steal time " + m.Steal
	}
	fmt.Fprintf(&b, "From the committed run ([all tables](../bench/results/results.md)): %s, %s, %d cores, Go %s, Redis %s, load average %s at its start and %s at its end%s, %s.\n\n",
		m.Date, m.CPU, m.Cores, strings.TrimPrefix(m.Go, "go"), m.RedisVersion, m.LoadStart, m.LoadEnd, steal, r.Elapsed)
	r.writeSummaryTable(&b, r.summaryRows())
	b.WriteString(docEnd)
	return b.String()
}

// updateDoc replaces the summary between docBegin and docEnd in the
// document at path with r's.
func (r *Report) updateDoc(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no bench summary (a line %q, later a line %q)", path, strings.TrimSpace(docBegin), strings.TrimSpace(docEnd))
	}
	doc = doc[:i] + r.docSummary() + doc[j+len(docEnd):]
	return os.WriteFile(path, []byte(doc), 0o644)
}
