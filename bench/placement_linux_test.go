package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// TestPin checks that Pin puts every thread of this process and of each
// server on one CPU with GOMAXPROCS 1, and that undo restores both.
func TestPin(t *testing.T) {
	srv := redistest.StartN(t, 2)
	s := &servers{byAddr: map[string]*redistest.Server{}}
	for _, r := range srv {
		s.byAddr[r.Addr] = r
	}
	pids := []int{os.Getpid(), srv[0].Pid(), srv[1].Pid()}
	before := map[int]string{}
	for _, pid := range pids {
		before[pid] = allowed(t, pid)
	}
	procs := runtime.GOMAXPROCS(0)

	undo, err := s.Pin()
	if err != nil {
		t.Fatal(err)
	}
	var one string
	for _, pid := range pids {
		for tid, cpus := range threadsAllowed(t, pid) {
			if strings.ContainsAny(cpus, ",-") {
				t.Errorf("pid %d thread %s may run on CPUs %s, want one", pid, tid, cpus)
			}
			if one == "" {
				one = cpus
			} else if cpus != one {
				t.Errorf("pid %d thread %s on CPU %s, others on %s", pid, tid, cpus, one)
			}
		}
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS %d while pinned, want 1", n)
	}

	undo()
	for _, pid := range pids {
		for tid, cpus := range threadsAllowed(t, pid) {
			if cpus != before[pid] {
				t.Errorf("pid %d thread %s may run on CPUs %s after undo, %s before", pid, tid, cpus, before[pid])
			}
		}
	}
	if n := runtime.GOMAXPROCS(0); n != procs {
		t.Errorf("GOMAXPROCS %d after undo, %d before", n, procs)
	}
}

// allowed returns the CPUs process pid may run on, as /proc lists them.
func allowed(t *testing.T, pid int) string {
	t.Helper()
	return cpusAllowed(t, fmt.Sprintf("/proc/%d/status", pid))
}

// threadsAllowed returns the CPUs each thread of process pid may run on.
func threadsAllowed(t *testing.T, pid int) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		out[e.Name()] = cpusAllowed(t, fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
	}
	return out
}

func cpusAllowed(t *testing.T, status string) string {
	t.Helper()
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s: no Cpus_allowed_list", status)
	return ""
}
