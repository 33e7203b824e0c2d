//go:build !linux

package main

import "syscall"

func busyAttr() *syscall.SysProcAttr { return nil }
