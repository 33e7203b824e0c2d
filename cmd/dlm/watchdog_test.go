package main

import (
	"syscall"
	"testing"
	"time"
)

// COMMAND's end is the watchdog's (the lock counts as lost) once the
// lease has ended, or when it came by SIGKILL after the validity dlm last
// passed on to the watchdog; otherwise it is COMMAND's own. Under two busy
// loops, dlm once passed a renewal on too late and reported the
// watchdog's SIGKILL as COMMAND's status 137 (TestRunMaxHold).
func TestWatchdogEnded(t *testing.T) {
	base := time.Now()
	confirmed, until := base.Add(time.Second), base.Add(2*time.Second)
	killed := 128 + int(syscall.SIGKILL)
	for _, tc := range []struct {
		name   string
		at     time.Time
		status int
		want   bool
	}{
		{"after the lease's end", until, 0, true},
		{"by SIGKILL after the validity the watchdog knew", confirmed, killed, true},
		{"by itself after the validity the watchdog knew", confirmed, 3, false},
		{"by SIGTERM after the validity the watchdog knew", confirmed, 128 + int(syscall.SIGTERM), false},
		{"by SIGKILL before the validity the watchdog knew", confirmed.Add(-time.Second), killed, false},
	} {
		if got := watchdogEnded(tc.at, until, confirmed, tc.status) != ""; got != tc.want {
			t.Errorf("%s: watchdog's end %v, want %v", tc.name, got, tc.want)
		}
	}
}
