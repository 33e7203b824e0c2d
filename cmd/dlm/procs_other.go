//go:build !linux

package main

import "time"

// monoNow stands in for CLOCK_MONOTONIC where dlm does not read it: the
// wall clock, which a clock step moves.
func monoNow() int64 { return time.Now().UnixNano() }

// A proc is a process; without /proc dlm knows none but its children.
type proc struct{ pid int }

// killTree finds nothing to kill without /proc.
func killTree(root int, spare ...int) int { return 0 }

// stopAdopted cannot follow processes that left COMMAND's group without /proc.
func stopAdopted(deadline func() time.Time) error { return nil }

// groupRuns cannot tell without /proc: it reports that the group runs.
func groupRuns(pgid int) bool { return true }

// stopped cannot tell without /proc.
func stopped(pid int) bool { return false }
