//go:build !linux

package main

import (
	"os"
	"syscall"
)

// selfExe names the running dlm binary for starting the supervisor.
func selfExe() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

// becomeSubreaper does nothing where there are no child subreapers: orphans
// of COMMAND's group go to init, and dlm cannot confirm them gone.
func becomeSubreaper() error { return nil }

// commandAttr puts COMMAND in a process group of its own.
func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
