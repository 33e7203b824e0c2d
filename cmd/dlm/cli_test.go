package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// dlmBin is the dlm binary built for these tests: they drive it as a user would.
var dlmBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlm-cli")
	if err != nil {
		panic(err)
	}
	dlmBin = filepath.Join(dir, "dlm")
	if out, err := exec.Command("go", "build", "-o", dlmBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runDLM runs the binary and returns its exit code and combined output.
func runDLM(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dlmBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String()
	}
	require.NoError(t, err)
	return 0, out.String()
}

func TestRunPassesFenceAndStatus(t *testing.T) {
	url := "single://" + redistest.Start(t).Addr
	code, out := runDLM(t, "run", "--url", url, "--key", "job", "--", "sh", "-c", `echo "key=$DLM_KEY fence=$DLM_FENCE"; exit 3`)
	assert.Equal(t, 3, code, out)
	assert.Contains(t, out, "key=job fence=1")
	code, out = runDLM(t, "run", "--url", url, "--key", "job", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "fence=2", "released after the first run, and the fence moved on")
}

func TestRunRacingProcesses(t *testing.T) {
	url := "single://" + redistest.Start(t).Addr
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $DLM_FENCE" >> ` + log + `; sleep 0.3; echo "end $DLM_FENCE" >> ` + log
	var cmds []*exec.Cmd
	for range 2 {
		c := exec.Command(dlmBin, "run", "--url", url, "--key", "race", "--wait", "20s", "--", "sh", "-c", script)
		require.NoError(t, c.Start())
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		require.NoError(t, c.Wait())
	}
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
	require.Len(t, lines, 8, string(b))
	// start/end pairs never interleave, and the fences differ and increase.
	assert.Equal(t, []string{"start", "end", "start", "end"}, []string{lines[0], lines[2], lines[4], lines[6]}, string(b))
	assert.Equal(t, lines[1], lines[3])
	assert.Equal(t, lines[5], lines[7])
	f1, _ := strconv.Atoi(lines[1])
	f2, _ := strconv.Atoi(lines[5])
	assert.Greater(t, f2, f1)
}

func TestRunCouldNotLock(t *testing.T) {
	url := "single://" + redistest.Start(t).Addr
	holder := exec.Command(dlmBin, "run", "--url", url, "--key", "busy", "--", "sleep", "3")
	require.NoError(t, holder.Start())
	defer holder.Wait()
	defer holder.Process.Kill()
	time.Sleep(500 * time.Millisecond) // let it take the lock
	code, out := runDLM(t, "run", "--url", url, "--key", "busy", "--", "true")
	assert.Equal(t, exitNotLocked, code, out)
	assert.Contains(t, out, "could not lock")
	code, out = runDLM(t, "run", "--url", url, "--key", "busy", "--wait", "200ms", "--", "true")
	assert.Equal(t, exitNotLocked, code, out)
	assert.Contains(t, out, "deadline exceeded")
}

func TestRunLockLost(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	url := "single://" + srv.Addr
	cmd := exec.Command(dlmBin, "run", "--url", url, "--key", "lost", "--ttl", "600ms", "--grace", "1s", "--", "sleep", "30")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	// Wait until it holds the lock, then steal it.
	ctx := context.Background()
	require.Eventually(t, func() bool { return c.Exists(ctx, "dlm:{lost}").Val() == 1 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Set(ctx, "dlm:{lost}", "thief", time.Minute).Err())
	start := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), out.String())
	assert.Contains(t, out.String(), "lost the lock")
	assert.Less(t, time.Since(start), 10*time.Second, "the command was stopped, not left to run 30s")
	assert.Equal(t, "thief", c.Get(ctx, "dlm:{lost}").Val(), "the thief's lock is untouched")
}

func TestRunSignalIsForwarded(t *testing.T) {
	url := "single://" + redistest.Start(t).Addr
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(dlmBin, "run", "--url", url, "--key", "sig", "--", "sh", "-c",
		`trap 'echo got TERM; exit 7' TERM; touch `+ready+`; while :; do sleep 0.05; done`)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM)) // to dlm, not to the command
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, 7, ee.ExitCode(), out.String())
	assert.Contains(t, out.String(), "got TERM")
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--", "true"},
		{"run", "--key", "k"},
		{"run", "--key", "k", "--on-lost", "shrug", "--", "true"},
		{"run", "--key", "k", "--url", "single://h:1?tll=1s", "--", "true"},
	} {
		code, out := runDLM(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, out)
	}
	code, out := runDLM(t, "run", "--key", "k", "--url", "single://h:1?tll=1s", "--", "true")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, `unknown parameter "tll"`)
}

func TestDoctor(t *testing.T) {
	bare := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	code, out := runDLM(t, "doctor", "--url", "single://"+bare.Addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "warn maxmemory-policy allkeys-lru")
	assert.Contains(t, out, "warn AOF off")

	safe := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	code, out = runDLM(t, "doctor", "--url", "single://"+safe.Addr)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   AOF on with appendfsync always")
	assert.Contains(t, out, "nothing to change")

	code, out = runDLM(t, "doctor", "--url", "single://127.0.0.1:1")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail unreachable")
}
