// Command dlmfaults runs dlm's fault suite: every strategy under every
// nemesis, each cell on real redis-server and redis-sentinel processes in
// network namespaces of their own, with client processes contending for
// one key and writing to a fenced register. It writes the matrix to
// -out (results.json, results.md) and exits 1 when a cell breaks a
// promise of the documentation. It needs root (network namespaces) and
// redis-server, redis-sentinel, iproute2 and nsenter.
//
//	go run ./faults/cmd/dlmfaults                      # the full matrix
//	go run ./faults/cmd/dlmfaults -duration 8s -clients 4 -strategies redlock -nemeses none,pause-holder
//	go run ./faults/cmd/dlmfaults -plant stale-lease   # with a bug planted on purpose
//	go run ./faults/cmd/dlmfaults -register postgres -late-writes -nemeses pause-holder,partition-holder,failover
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/dlmgo/dlm/faults"
)

func main() {
	faults.MainIfClient()
	var (
		strategies = flag.String("strategies", strings.Join(faults.Strategies(), ","), "strategies, comma-separated")
		nemeses    = flag.String("nemeses", strings.Join(faults.Nemeses(), ","), "nemeses, comma-separated; a+b strikes with a and b at once")
		clients    = flag.Int("clients", 8, "client processes per cell")
		primitive  = flag.String("primitive", "", `what the clients take: "" the plain lock, or one of `+strings.Join(faults.Primitives(), ", ")+` (strategies of one deployment only)`)
		workers    = flag.Int("workers", 1, "goroutines per client process, locking through its one Manager (2 or more: Unlocks hand the lock over)")
		duration   = flag.Duration("duration", 20*time.Second, "length of each cell")
		minCalls   = flag.Int("min-attempts", 0, "run each cell on past -duration until its clients made this many Lock calls (at most 4x -duration)")
		ttl        = flag.Duration("ttl", time.Second, "lease TTL")
		hold       = flag.Duration("hold", 10*time.Millisecond, "how long a holder keeps the lock")
		wait       = flag.Duration("wait", 2*time.Second, "how long a Lock call may wait")
		plant      = flag.String("plant", "", `a bug to plant: "stale-lease" (in the clients: leases outlive the servers' keys) or "unfenced-store" (in the register: its store writes without the fence check)`)
		register   = flag.String("register", "", `where the register keeps fences and data: "" its own map, "postgres" (a PostgreSQL table, through package fencing's SQL; needs postgresql) or "redis" (fencing's Redis writes, on a redis-server of its own)`)
		lateWrites = flag.Bool("late-writes", false, "a holder whose lease ends in a long hold writes again, unchecked, TTL/2 and 3 TTLs later: late writes for the register's fence to refuse")
		out        = flag.String("out", "faults/results", "directory for results.json and results.md")
		note       = flag.String("note", "", "a line added to the results' header")
		rejudge    = flag.Bool("rejudge", false, "run nothing: judge -out's results.json anew against the promises and rewrite the results")
	)
	flag.Parse()
	if *rejudge {
		os.Exit(rejudgeResults(*out))
	}
	if !slices.Contains(faults.Registers(), *register) {
		fmt.Fprintf(os.Stderr, "dlmfaults: -register %q: want one of %q\n", *register, faults.Registers())
		os.Exit(2)
	}
	if *primitive != "" && !slices.Contains(faults.Primitives(), *primitive) {
		fmt.Fprintf(os.Stderr, "dlmfaults: -primitive %q: want one of %s\n", *primitive, strings.Join(faults.Primitives(), ", "))
		os.Exit(2)
	}
	var cells []faults.Cell
	for _, s := range strings.Split(*strategies, ",") {
		for _, n := range strings.Split(*nemeses, ",") {
			if faults.Applies(s, n) && faults.PrimitiveApplies(s, *primitive) {
				cells = append(cells, faults.Cell{Strategy: s, Nemesis: n, Clients: *clients, Workers: *workers, Primitive: *primitive, Duration: *duration, MinAttempts: *minCalls,
					TTL: *ttl, Hold: *hold, Wait: *wait, Plant: *plant, Register: *register, LateWrites: *lateWrites})
			}
		}
	}
	if len(cells) == 0 {
		fmt.Fprintln(os.Stderr, "dlmfaults: no cell: check -strategies and -nemeses")
		os.Exit(2)
	}
	tmp, err := os.MkdirTemp("", "dlmfaults")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlmfaults:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)
	start, loadBefore := time.Now(), loadAverage()
	results := faults.Matrix(cells, tmp, *out, os.Stdout, 1) // one at a time: the figures are the cells' own
	var args []string
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "out" && f.Name != "note" {
			args = append(args, "-"+f.Name+" "+f.Value.String())
		}
	})
	header := fmt.Sprintf("Fault matrix: `go run ./faults/cmd/dlmfaults %s` (%d clients, %v per cell, TTL %v), %s, %d CPUs, %v in all.",
		strings.Join(args, " "), *clients, *duration, *ttl, start.UTC().Format("2006-01-02"), runtime.NumCPU(), time.Since(start).Round(time.Second))
	if loadBefore != "" {
		header += fmt.Sprintf(" Load average (/proc/loadavg, 1, 5, 15 min): %s at the start, %s at the end.", loadBefore, loadAverage())
	}
	if *note != "" {
		header += " " + *note
	}
	if err := faults.WriteResults(*out, results, header); err != nil {
		fmt.Fprintln(os.Stderr, "dlmfaults:", err)
		os.Exit(2)
	}
	for _, r := range results {
		if !r.Kept || r.Err != "" {
			os.Exit(1)
		}
	}
}

// loadAverage returns the machine's load averages over 1, 5 and 15
// minutes, "" where /proc/loadavg is not.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// rejudgeResults rewrites dir's results with today's promises, keeping the
// header line of results.md.
func rejudgeResults(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlmfaults:", err)
		return 2
	}
	var results []faults.Result
	if err := json.Unmarshal(b, &results); err != nil {
		fmt.Fprintln(os.Stderr, "dlmfaults:", err)
		return 2
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	header, _, _ := strings.Cut(string(md), "\n")
	faults.Rejudge(results)
	if err := faults.WriteResults(dir, results, header); err != nil {
		fmt.Fprintln(os.Stderr, "dlmfaults:", err)
		return 2
	}
	for _, r := range results {
		if !r.Kept {
			return 1
		}
	}
	return 0
}
