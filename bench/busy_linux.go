package main

import "syscall"

// busyAttr makes a busy loop die with this process.
func busyAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
