package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// alive reports whether pid runs (a zombie, killed and not yet reaped,
// does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// startWithGrandchild starts dlm run with a shell that starts a background
// sleep (a grandchild of dlm run, in COMMAND's group) and then waits; it
// returns the dlm process, its output and the grandchild's pid.
func startWithGrandchild(t *testing.T, url, key string, flags ...string) (*exec.Cmd, *bytes.Buffer, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	args := append([]string{"run", "--url", url, "--key", key}, flags...)
	args = append(args, "--", "sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait")
	cmd := exec.Command(dlmBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "COMMAND never wrote its pid file")
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscallKill(pid)
		}
	})
	require.True(t, alive(pid))
	return cmd, &out, pid
}

// A lost lock stops the whole group, the grandchild included, before the
// lease's validity ends; the next holder finds nothing of it running.
func TestRunLostStopsTheGroup(t *testing.T) {
	srv := redistest.Start(t)
	url := "single://" + srv.Addr + "?timeout=200ms"
	cmd, out, pid := startWithGrandchild(t, url, "group-lost", "--ttl", "1500ms", "--grace", "200ms")
	srv.Freeze(t) // renewals fail: the lease runs out
	frozen := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), out.String())
	assert.False(t, alive(pid), "the grandchild outlived the lost lock")
	assert.Less(t, time.Since(frozen), 1500*time.Millisecond, "stopped within the lease (1.5s TTL) whose last renewal came before the freeze")
	srv.Thaw(t)
	code, text := runDLM(t, "run", "--url", url, "--key", "group-lost", "--wait", "5s", "--", "true")
	assert.Equal(t, 0, code, text)
}

// dlm killed with SIGKILL: the group dies with it, before the lease could
// pass to anyone else.
func TestRunKilledTakesTheGroupAlong(t *testing.T) {
	url := "single://" + redistest.Start(t).Addr
	cmd, _, pid := startWithGrandchild(t, url, "group-killed", "--ttl", "2s")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool { return !alive(pid) }, time.Second, 5*time.Millisecond, "the grandchild outlived dlm")
	assert.Less(t, time.Since(killed), time.Second)

	start := time.Now()
	code, text := runDLM(t, "run", "--url", url, "--key", "group-killed", "--wait", "10s", "--", "true")
	assert.Equal(t, 0, code, text)
	assert.Greater(t, time.Since(start), 500*time.Millisecond, "the next holder waited for the lease to run out")
}

// What COMMAND leaves running in its group is killed before the lock is
// released.
func TestRunLeftoversKilledBeforeUnlock(t *testing.T) {
	url := "single://" + redistest.Start(t).Addr
	pidFile := filepath.Join(t.TempDir(), "pid")
	code, text := runDLM(t, "run", "--url", url, "--key", "leftover", "--", "sh", "-c", "sleep 60 & echo $! > "+pidFile)
	require.Equal(t, 0, code, text)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !alive(pid) }, time.Second, 5*time.Millisecond, "a background process of COMMAND outlived the lock")
}

// A TTL too short to stop COMMAND within the lease is refused before any
// connection; Ctrl-C while waiting exits 130.
func TestRunExitCodes(t *testing.T) {
	code, text := runDLM(t, "run", "--url", "single://127.0.0.1:1", "--key", "k", "--ttl", "100ms", "--", "true")
	assert.Equal(t, 2, code, text)
	assert.Contains(t, text, "too short")

	srv := redistest.Start(t)
	url := "single://" + srv.Addr
	holder, _, _ := startWithGrandchild(t, url, "busy")
	_ = holder
	waiter := exec.Command(dlmBin, "run", "--url", url, "--key", "busy", "--wait", "1m", "--", "true")
	var out bytes.Buffer
	waiter.Stdout, waiter.Stderr = &out, &out
	require.NoError(t, waiter.Start())
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, waiter.Process.Signal(os.Interrupt))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- waiter.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %s", err, out.String())
		assert.Equal(t, exitInterrupted, ee.ExitCode(), out.String())
	case <-ctx.Done():
		_ = waiter.Process.Kill()
		t.Fatal("dlm run did not end after SIGINT")
	}
}

func syscallKill(pid int) error { p, _ := os.FindProcess(pid); return p.Kill() }
