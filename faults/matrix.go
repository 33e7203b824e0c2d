package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Promise is what dlm's documentation promises for a strategy under a
// nemesis.
type Promise struct {
	// Exclusion: no two clients hold valid leases at once, and no write a
	// client sent after its lease ended is accepted.
	Exclusion bool `json:"exclusion"`
	// Fences: every grant's fence is above those of the grants completed
	// before it began, so the register never accepts a stale holder's
	// write. Without Exclusion, a write accepted from a holder after a
	// larger fence was granted (LostWrites) does not break it: two holders
	// then write at once, and a store accepts the older's write until it
	// has seen the newer fence (docs/fencing.md: what a fence cannot
	// refuse).
	Fences bool `json:"fences"`
	// Holders is, with Exclusion, the most holds that may be valid at
	// once: a semaphore's permits, a read-write lock's readers; 1 for the
	// other primitives (a multi-key lock's clients take two of three keys,
	// so any two holds share one); 0 (results of earlier versions) not
	// checked.
	Holders int `json:"holders,omitempty"`
	// LateWrites: the clients write after their leases end on purpose
	// (Cell.LateWrites), so a late write the register accepted while no
	// larger fence was granted breaks nothing; one accepted after a larger
	// fence was granted (LostWrites) still breaks Fences.
	LateWrites bool   `json:"late_writes,omitempty"`
	Why        string `json:"why,omitempty"` // where the documentation says a guarantee does not hold
}

// promise returns what the documentation promises for strategy under
// nemesis.
func promise(strategy, nemesis string) Promise {
	if parts := strings.Split(nemesis, "+"); len(parts) > 1 {
		// Several at once: what each of them keeps.
		p := Promise{Exclusion: true, Fences: true}
		var why []string
		for _, n := range parts {
			q := promise(strategy, n)
			p.Exclusion, p.Fences = p.Exclusion && q.Exclusion, p.Fences && q.Fences
			if q.Why != "" {
				why = append(why, q.Why)
			}
		}
		p.Why = strings.Join(why, "; ")
		return p
	}
	all := Promise{Exclusion: true, Fences: true}
	// Clocks (docs/guarantees.md: clock drift and jumps): a server whose
	// clock gets ahead by more than the drift margin ends leases early.
	// On Redlock one such master is enough when it was one of a bare
	// quorum that granted a lock (docs/redlock.md); fence counters have no
	// TTL.
	switch nemesis {
	case "clock-jump":
		return Promise{Fences: true, Why: "a server clock jumping forward by more than the drift margin frees a lock early; on Redlock, one master of a bare quorum is enough (guarantees.md: clock drift and jumps)"}
	case "clock-drift":
		return Promise{Fences: true, Why: "a master whose clock runs faster than the drift margin allows frees the locks it granted early: one of a bare quorum is enough (redlock.md)"}
	case "clock-drift-beyond":
		return Promise{Fences: true, Why: "clocks running faster than the drift margin allows end leases early (guarantees.md: clock drift and jumps)"}
	case "clock-drift-within":
		return all
	}
	if strategy != unguarded(strategy) {
		return all // README: Amnesia
	}
	switch nemesis {
	case "kill-empty":
		return Promise{Why: "a majority lost its data: no lock survives that (README: what a lock guarantees)"}
	case "kill-delayed":
		return Promise{Exclusion: true, Why: "the restarted majority's fence counters start again (README: counters never go back is an assumption)"}
	case "failover", "failover-lagging", "cluster-failover", "stop-majority":
		// A primary or master frozen for 2s is failed over too (Sentinel's
		// down-after 1s; the Cluster's node timeout 2s).
		switch strategy {
		case "failover-ack-none":
			return Promise{Why: "a replica promoted before it received the lock (ack=none: the failover race)"}
		case "cluster":
			return Promise{Why: "the single strategy on a Cluster: a replica promoted before it received the lock (asynchronous replication)"}
		}
	}
	return all
}

// promise returns what the documentation promises for the cell.
func (c Cell) promise() Promise {
	p := promise(c.Strategy, c.Nemesis)
	if p.Exclusion {
		p.Holders = c.holders()
	}
	p.LateWrites = c.LateWrites
	return p
}

// holders returns the most holds of the cell's primitive that may be valid
// at once (Promise.Holders).
func (c Cell) holders() int {
	if c.Primitive == "semaphore" || c.Primitive == "rwlock" {
		return semaphorePermits
	}
	return 1
}

// A Result is one cell of the matrix.
type Result struct {
	Cell    Cell    `json:"cell"`
	Counts  Counts  `json:"counts"`
	Faults  int     `json:"faults"` // how many times the nemesis struck
	Promise Promise `json:"promise"`
	// Kept reports whether the counts keep the promise.
	Kept bool   `json:"kept"`
	Err  string `json:"error,omitempty"`
}

// keeps reports whether c keeps p.
func keeps(p Promise, c Counts) bool {
	if c.Linearizable != "Ok" && c.Linearizable != "Unknown" {
		return false
	}
	if p.Exclusion && (c.Overlaps > 0 || !p.LateWrites && c.LateAccepted > 0 || p.Holders > 0 && c.MostHolders > p.Holders) {
		return false
	}
	if p.Fences && (c.FenceRegressions > 0 || p.Exclusion && c.LostWrites > 0) {
		return false
	}
	return true
}

// Applies reports whether nemesis makes sense for strategy.
func Applies(strategy, nemesis string) bool {
	n := findNemesis(nemesis)
	return n != nil && n.applies(strategy)
}

// Primitives are what clients can take besides the plain lock (""):
// Cell.Primitive.
func Primitives() []string {
	return []string{"fairlock", "election", "semaphore", "rwlock", "multilock"}
}

// PrimitiveApplies reports whether primitive ("" the plain lock) runs over
// strategy: the fair lock and the election need a strategy of one
// deployment, not Redlock; the others, made of plain locks, run over
// every strategy.
func PrimitiveApplies(strategy, primitive string) bool {
	return primitive != "fairlock" && primitive != "election" || unguarded(strategy) != "redlock"
}

// Strategies and Nemeses list what the matrix covers.
func Strategies() []string { return append([]string(nil), strategies...) }

func Nemeses() []string {
	var out []string
	for _, n := range nemeses {
		out = append(out, n.Name)
	}
	return out
}

// Matrix runs every cell (files under dir), at most parallel at a time,
// reporting each on progress as it ends, with the nemesis's notes. When
// histories is not empty, the event history of every cell that broke a
// promise is written there, one JSON event per line, to
// broken-STRATEGY-NEMESIS.jsonl, and its servers' logs to
// broken-STRATEGY-NEMESIS-logs/HOST.log, for finding out why. Each cell
// has a network of its own (NewNet), so cells run side by side share only
// the machine's CPUs.
func Matrix(cells []Cell, dir, histories string, progress io.Writer, parallel int) []Result {
	out := make([]Result, len(cells))
	var mu sync.Mutex // progress
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, c := range cells {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			start := time.Now()
			r, events := runResult(c, filepath.Join(dir, fmt.Sprintf("cell%d", i)), histories, progress, &mu)
			out[i] = r
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(progress, "%-18s %-18s %s (%v)\n", c.Taken(), c.Nemesis, r.summary(), time.Since(start).Round(time.Second))
			for _, e := range events {
				if e.Kind == Note {
					fmt.Fprintf(progress, "    %s\n", e.Info)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// runResult runs cell c in dir and checks its history, which it keeps
// under histories (with the servers' logs) when c broke its promise.
func runResult(c Cell, dir, histories string, progress io.Writer, mu *sync.Mutex) (Result, []Event) {
	r := Result{Cell: c, Promise: c.promise()}
	events, err := RunCell(c, dir)
	if err != nil {
		r.Err = err.Error()
		return r, events
	}
	r.Counts = Check(events)
	for _, e := range events {
		if e.Kind == Fault {
			r.Faults++
		}
	}
	r.Kept = keeps(r.Promise, r.Counts)
	if !r.Kept && histories != "" {
		name := filepath.Join(histories, fmt.Sprintf("broken-%s-%s", strings.ReplaceAll(c.Taken(), "/", "-"), c.Nemesis))
		mu.Lock()
		defer mu.Unlock()
		if err := writeHistory(name+".jsonl", events); err != nil {
			fmt.Fprintf(progress, "faults: the broken cell's history: %v\n", err)
		}
		if err := keepLogs(dir, name+"-logs"); err != nil {
			fmt.Fprintf(progress, "faults: the broken cell's server logs: %v\n", err)
		}
	}
	return r, events
}

func writeHistory(file string, events []Event) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r Result) summary() string {
	if r.Err != "" {
		return "error: " + r.Err
	}
	c := r.Counts
	verdict := "kept"
	switch {
	case !r.Kept:
		verdict = "BROKEN"
	case !r.Promise.Exclusion || !r.Promise.Fences:
		verdict = "expected"
	}
	several := ""
	if c.SeveralKeys > 0 {
		several = fmt.Sprintf(", %d of several keys", c.SeveralKeys)
	}
	store := ""
	if r.Cell.Register != "" || r.Cell.LateWrites {
		store = fmt.Sprintf(", writes %d (accepted %d, refused %d, given up %d, store errors %d), late refused %d", c.Writes, c.StoreAccepted, c.SavedWrites, c.StoreCancelled, c.StoreErrors, c.LateRefused)
	}
	return fmt.Sprintf("%s: %d/%d granted (%d handed off%s), %d faults, overlaps %d (most holders at once %d), fence regressions %d, lost writes %d, saved %d, late %d (accepted %d)%s, longest wait %dms, register %s",
		verdict, c.Grants, c.Attempts, c.Handoffs, several, r.Faults, c.Overlaps, c.MostHolders, c.FenceRegressions, c.LostWrites, c.SavedWrites, c.LateWrites, c.LateAccepted, store, c.LongestWaitMs, c.Linearizable)
}

// Rejudge sets each result's promise and verdict anew from what the
// documentation promises now (promise), for results read back from
// results.json.
func Rejudge(results []Result) {
	for i := range results {
		r := &results[i]
		r.Promise = r.Cell.promise()
		r.Kept = r.Err == "" && keeps(r.Promise, r.Counts)
	}
}

// WriteResults writes results as JSON and as a Markdown table into dir.
func WriteResults(dir string, results []Result, header string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString(header + "\n\n")
	if slices.ContainsFunc(results, func(r Result) bool { return r.Cell.Register != "" || r.Cell.LateWrites }) {
		writeStoreTable(&md, results)
		return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644)
	}
	md.WriteString("| strategy | nemesis | granted / attempts | faults | overlaps | fence regressions | lost writes | saved by the fence | late writes (accepted) | longest wait | register | promise | verdict |\n")
	md.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		c := r.Counts
		p, verdict := promiseAndVerdict(r)
		granted := fmt.Sprintf("%d / %d", c.Grants, c.Attempts)
		if c.Handoffs > 0 {
			granted += fmt.Sprintf(" (%d handed over)", c.Handoffs)
		}
		overlaps := strconv.Itoa(c.Overlaps)
		if h := r.Cell.holders(); r.Cell.Primitive != "" {
			overlaps += fmt.Sprintf(" (holders at once: %d, allowed %d)", c.MostHolders, h)
		}
		fmt.Fprintf(&md, "| %s | %s | %s | %d | %s | %d | %d | %d | %d (%d) | %dms | %s | %s | %s |\n",
			r.Cell.Taken(), r.Cell.Nemesis, granted, r.Faults, overlaps, c.FenceRegressions, c.LostWrites,
			c.SavedWrites, c.LateWrites, c.LateAccepted, c.LongestWaitMs, c.Linearizable, p, verdict)
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644)
}

// keepLogs copies the log of every server under cell (cell/HOST/redis.log) to
// dir/HOST.log.
func keepLogs(cell, dir string) error {
	logs, err := filepath.Glob(filepath.Join(cell, "*", "redis.log"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(filepath.Dir(l))+".log"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// promiseAndVerdict says what a cell's result promised and whether it was
// kept, as the results tables write it.
func promiseAndVerdict(r Result) (promise, verdict string) {
	promise = "exclusion, fences"
	switch {
	case !r.Promise.Exclusion && !r.Promise.Fences:
		promise = "none: " + r.Promise.Why
	case !r.Promise.Fences:
		promise = "exclusion only: " + r.Promise.Why
	case !r.Promise.Exclusion:
		promise = "fences only: " + r.Promise.Why
	}
	verdict = "kept"
	switch {
	case r.Err != "":
		verdict = "error: " + r.Err
	case !r.Kept:
		verdict = "**BROKEN**"
	case !r.Promise.Exclusion || !r.Promise.Fences:
		verdict = "expected"
	}
	return promise, verdict
}
