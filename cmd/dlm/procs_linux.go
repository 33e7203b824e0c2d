package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// monoNow reads CLOCK_MONOTONIC, the clock Go's timers and time.Since use
// on Linux. It is one clock for every process of the machine, so dlm can
// tell the watchdog a deadline on it that stays right however late the
// message is read.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("dlm: CLOCK_MONOTONIC: " + err.Error()) // never on Linux
	}
	return ts.Nano()
}

// A proc is one line of the process table, as /proc/PID/stat gives it.
type proc struct {
	pid, ppid, pgid int
	state           byte // 'R', 'S', 'T' (stopped), 'Z' (zombie), ...
	comm            string
	start           string // start time since boot: with pid, names the process
}

// readProc reads /proc/PID/stat; ok is false when pid does not exist.
func readProc(pid int) (p proc, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses;
	// the fields after it follow the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return proc{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, false
	}
	p = proc{pid: pid, state: f[0][0], comm: s[open+1 : end], start: f[19]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgid, _ = strconv.Atoi(f[2])
	return p, true
}

// procs lists every process of the machine.
func procs() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var all []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			all = append(all, p)
		}
	}
	return all
}

// descendants returns the living (not zombie) processes below root but
// those in spare (the processes below them are returned).
func descendants(root int, spare ...int) []proc {
	kids := map[int][]proc{}
	for _, p := range procs() {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	skip := map[int]bool{}
	for _, s := range spare {
		skip[s] = true
	}
	var out []proc
	for todo := []int{root}; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for _, k := range kids[pid] {
			if k.state != 'Z' && !skip[k.pid] {
				out = append(out, k)
			}
			todo = append(todo, k.pid)
		}
	}
	return out
}

// killProc sends SIGKILL to p if p is still the process that was read: it
// is signalled through a pidfd opened before its start time is checked
// again, so a pid reused by another process since is left alone.
func killProc(p proc) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if now, ok := readProc(p.pid); ok && now.start == p.start {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// killTree sends SIGKILL to every living process below root but those in
// spare, and reports how many it found. A process that
// forks meanwhile, or whose children are re-parented as it dies, leaves
// some for the next call.
func killTree(root int, spare ...int) int {
	ps := descendants(root, spare...)
	for _, p := range ps {
		killProc(p)
	}
	return len(ps)
}

// stopAdopted kills and reaps every process below dlm: what COMMAND started
// that left its process group (setsid, setpgid) and was re-parented to dlm,
// a child subreaper, when its parent died. Call it once the supervisor has
// been waited for: it reaps every child of dlm. It gives up with an error
// naming what still runs once deadline() has passed, and at least a second
// after it began.
func stopAdopted(deadline func() time.Time) error {
	least := time.Now().Add(time.Second)
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		killTree(os.Getpid())
		reapAll()
		left := descendants(os.Getpid())
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline()) && time.Now().After(least) {
			return fmt.Errorf("processes COMMAND started outside its group still run after SIGKILL: %s", describe(left))
		}
		time.Sleep(pause)
	}
}

// reapAll reaps the exited children of dlm.
func reapAll() {
	for {
		pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if pid <= 0 || errors.Is(err, syscall.ECHILD) || err != nil {
			return
		}
	}
}

// describe names processes for a message: "1234 (sleep), 1240 (sh)".
func describe(ps []proc) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d (%s)", p.pid, p.comm)
	}
	return b.String()
}

// groupRuns reports whether a process of the group pgid runs (is not a
// zombie).
func groupRuns(pgid int) bool {
	for _, p := range procs() {
		if p.pgid == pgid && p.state != 'Z' {
			return true
		}
	}
	return false
}

// stopped reports whether pid is stopped (SIGSTOP, SIGTSTP, a debugger).
func stopped(pid int) bool {
	p, ok := readProc(pid)
	return ok && (p.state == 'T' || p.state == 't')
}
