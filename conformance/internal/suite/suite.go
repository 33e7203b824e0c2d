// Package suite is what package conformance and its sibling
// conformance/family share to run rules: the run's unique id and the
// watchdog every rule's subtest runs under.
package suite

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// WatchdogEnv names the environment variable that overrides how long one
// rule may run before the watchdog ends the test binary (a Go duration,
// default DefaultWatchdog).
const WatchdogEnv = "DLM_CONFORMANCE_WATCHDOG"

// DefaultWatchdog is how long one rule may run when WatchdogEnv is unset.
const DefaultWatchdog = 60 * time.Second

// watchdogLimit returns the limit, from WatchdogEnv when set and valid.
func watchdogLimit(t *testing.T) time.Duration {
	if v := os.Getenv(WatchdogEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil && d > 0 {
			return d
		}
		t.Logf("conformance: ignoring %s=%q: want a positive duration", WatchdogEnv, v)
	}
	return DefaultWatchdog
}

// RunID makes keys and script sources unique to one run of a suite, so runs
// against a shared server do not meet.
func RunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// watchdog ends the process, naming the subtest, when the subtest has not
// finished within limit. A hung call cannot be interrupted from outside the
// goroutine that made it, and t.Fatal works only in that goroutine, so
// ending the process is the only way to fail rather than hang.
func watchdog(t *testing.T, limit time.Duration) {
	name := t.Name()
	timer := time.AfterFunc(limit, func() {
		panic(fmt.Sprintf("conformance: %s did not finish within %v: a call does not honour its context", name, limit))
	})
	t.Cleanup(func() { timer.Stop() })
}

// Subtest runs f as a subtest named name under the watchdog.
func Subtest(t *testing.T, name string, f func(t *testing.T)) bool {
	return t.Run(name, func(t *testing.T) {
		watchdog(t, watchdogLimit(t))
		f(t)
	})
}

var prefixSeq atomic.Int64

// Prefix returns a key prefix unique to one subtest of run: its keys share
// one Redis Cluster hash slot.
func Prefix(run string) string {
	return fmt.Sprintf("dlm-conformance:{%s-%d}:", run, prefixSeq.Add(1))
}
