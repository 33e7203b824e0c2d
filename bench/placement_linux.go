package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// canPin reports whether this run can pin its processes (servers.Pin).
func canPin() bool {
	var set unix.CPUSet
	return unix.SchedGetaffinity(0, &set) == nil && set.Count() > 0
}

// Pin puts this process and every server on one CPU, the first this
// process may run on, with GOMAXPROCS 1, as a Go program started on one
// CPU has (a second P would spin on that CPU, taking it from the server).
// undo restores every CPU mask it changed, and GOMAXPROCS.
//
// A serial pair's latency is mostly wake-ups: the client waits for the
// server and the server for the client, twice a pair. On one CPU a wake-up
// is a context switch; across CPUs of a virtual machine it is the
// hypervisor's wake of an idle CPU, which can cost several times the
// pair's work (about 35µs against 190µs a pair on the 2-core VM of the
// committed results). Left to the scheduler, which one a contender gets
// changes from one repetition to the next, and a ratio compares
// placements, not libraries.
func (s *servers) Pin() (undo func(), err error) {
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		return nil, err
	}
	cpu := -1
	for c := 0; c < len(own)*64; c++ {
		if own.IsSet(c) {
			cpu = c
			break
		}
	}
	if cpu < 0 {
		return nil, errors.New("this process may run on no CPU")
	}
	var one unix.CPUSet
	one.Set(cpu)
	var undos []func()
	undo = func() {
		for _, u := range undos {
			u()
		}
	}
	pids := []int{os.Getpid()}
	for _, srv := range s.byAddr {
		pids = append(pids, srv.Pid())
	}
	for _, pid := range pids {
		var was unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &was); err != nil {
			undo()
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
		if err := pinProcess(pid, &one); err != nil {
			undo()
			return nil, err
		}
		undos = append(undos, func() { _ = pinProcess(pid, &was) })
	}
	procs := runtime.GOMAXPROCS(1)
	undos = append(undos, func() { runtime.GOMAXPROCS(procs) })
	return undo, nil
}

// pinProcess sets the CPU mask of every thread of process pid. A thread
// created meanwhile takes its creator's mask, which may be the old one, so
// it goes over the threads until a pass finds none it has not set.
func pinProcess(pid int, set *unix.CPUSet) error {
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pid %d, thread %d: %w", pid, tid, err)
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
}
