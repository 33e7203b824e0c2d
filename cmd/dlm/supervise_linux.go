package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// selfExe names the running dlm binary for starting the supervisor:
// /proc/self/exe reaches the file dlm was started from even when its path
// now names another file or none (a package upgrade, a deploy that replaced
// it). os.Executable would give that path.
func selfExe() string { return "/proc/self/exe" }

// becomeSubreaper makes dlm a child subreaper: processes orphaned below it
// (COMMAND's group, when the supervisor or the leader dies) become its
// children, so it can see them, kill them and reap them.
func becomeSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// commandAttr puts COMMAND in a process group of its own, killed with
// SIGKILL when the supervisor dies.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
