package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/internal/redistest"
)

// Issue 33, finding 6: one meaning per flag and bound, documented signals,
// help and version.

// openStrategy returns the strategy over url, for looking at what the CLI did.
func openStrategy(t *testing.T, url string) driver.Strategy {
	t.Helper()
	cfg, err := config.ParseURL(url)
	require.NoError(t, err)
	s, closer, err := cfg.OpenStrategy(context.Background(), goredis.Dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	return s
}

// exitOf waits for cmd (at most a minute) and returns its exit status.
func exitOf(t *testing.T, cmd *exec.Cmd, out fmt.Stringer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()) // as a shell reports it
			}
			return ee.ExitCode()
		}
		require.NoError(t, err, out.String())
		return 0
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%v did not end within a minute:\n%s", cmd.Args, out)
		return -1
	}
}

// holdWhile runs `dlm run` holding key with a COMMAND that prints "ready"
// and runs until killed; it returns once COMMAND runs.
func holdWhile(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(dlmBin, append(args, "--", "sh", "-c", "echo ready; exec sleep 60")...)
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = w.Close() })
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return cmd
}

// While dlm run waits for a lock, SIGINT, SIGTERM and SIGHUP end the wait:
// dlm says so and exits 128+N, having taken nothing.
func TestSignalsWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "single://" + srv.Addr
	s := openStrategy(t, url)
	holdWhile(t, "run", "--url", url, "--key", "sig")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(signalName(sig), func(t *testing.T) {
			waiter := exec.Command(dlmBin, "run", "--url", url, "--key", "sig", "--wait", "1m", "--", "true")
			out := &lockedBuffer{} // read while dlm writes
			waiter.Stdout, waiter.Stderr = out, out
			require.NoError(t, waiter.Start())
			// Waiting: it has subscribed to the key's release.
			require.Eventually(t, func() bool {
				info, err := inspect.Key(context.Background(), s, "sig")
				return err == nil && info.Waiters >= 1
			}, 20*time.Second, 10*time.Millisecond, "the waiter never waited")
			require.NoError(t, waiter.Process.Signal(sig))
			assert.Equal(t, 128+int(sig), exitOf(t, waiter, out), out.String())
			assert.Contains(t, out.String(), "interrupted by "+signalName(sig)+" while waiting for \"sig\": nothing was taken")
			require.Eventually(t, func() bool {
				info, err := inspect.Key(context.Background(), s, "sig")
				return err == nil && info.Waiters == 0
			}, 20*time.Second, 10*time.Millisecond, "the waiter's subscription outlived it")
		})
	}
}

// While COMMAND runs, dlm forwards SIGTERM and SIGHUP to it, releases the
// lock once it exits, and exits with COMMAND's status.
func TestSignalsWhileHolding(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "single://" + srv.Addr
	s := openStrategy(t, url)
	for _, tc := range []struct {
		sig     syscall.Signal
		command string
		want    int
	}{
		{syscall.SIGTERM, `trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done`, 7},
		{syscall.SIGHUP, `echo ready; exec sleep 60`, 128 + int(syscall.SIGHUP)},
		{syscall.SIGTERM, `echo ready; exec sleep 60`, 128 + int(syscall.SIGTERM)},
	} {
		t.Run(signalName(tc.sig), func(t *testing.T) {
			cmd := exec.Command(dlmBin, "run", "--url", url, "--key", "held", "--", "sh", "-c", tc.command)
			r, w := io.Pipe()
			errOut := &lockedBuffer{} // read while dlm writes
			cmd.Stdout, cmd.Stderr = w, errOut
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = w.Close() })
			line, err := bufio.NewReader(r).ReadString('\n')
			require.NoError(t, err, errOut.String())
			require.Equal(t, "ready\n", line)
			go func() { _, _ = io.Copy(io.Discard, r) }()
			require.NoError(t, cmd.Process.Signal(tc.sig))
			assert.Equal(t, tc.want, exitOf(t, cmd, errOut), errOut.String())
			info, err := inspect.Key(context.Background(), s, "held")
			require.NoError(t, err)
			assert.False(t, info.Held, "released once COMMAND exited")
		})
	}
}

// --wait 0 is one attempt in dlm elect too, as in dlm run: a second
// campaigner gives up (75) instead of campaigning forever.
func TestElectWaitZeroIsOneAttempt(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	holdWhile(t, "elect", "--url", url, "--name", "e")
	code, out := runDLM(t, "elect", "--url", url, "--name", "e", "--wait", "0", "--", "true")
	assert.Equal(t, exitNotLocked, code, out)
	code, out = runDLM(t, "run", "--url", url, "--key", "free", "--", "true")
	assert.Equal(t, 0, code, out)
}

// --wait 0 against a server that stopped answering ends within its
// documented bound with exit 75, naming the deadline.
func TestWaitZeroAgainstAStalledServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Freeze(t)
	defer srv.Thaw(t)
	code, out := runDLM(t, "run", "--url", "single://"+srv.Addr, "--key", "k", "--", "true")
	assert.Equal(t, exitNotLocked, code, out)
	assert.Contains(t, out, "context deadline exceeded")
}

// dlm revoke says the state is unknown when its server did not answer,
// not that no lock was held.
func TestRevokeStateUnknown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "single://" + srv.Addr + "?timeout=300ms"
	code, out := runDLM(t, "revoke", "--url", url, "--reason", "test", "k")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "no lock held")
	srv.Freeze(t)
	defer srv.Thaw(t)
	code, out = runDLM(t, "revoke", "--url", url, "--reason", "test", "k")
	assert.Equal(t, exitNotLocked, code, out)
	assert.Contains(t, out, "state unknown")
	assert.NotContains(t, out, "no lock held")
}

// dlm help CMD prints the command's help on stdout, dlm version the build.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for name := range commands {
		var out, errOut bytes.Buffer
		assert.Equal(t, 0, run(context.Background(), []string{"help", name}, &out, &errOut), "dlm help %s: %s", name, errOut.String())
		assert.Contains(t, out.String(), "usage: dlm "+name, "dlm help %s", name)
	}
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"help", "nope"}, &out, &errOut))
	code, text := runDLM(t, "version")
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "module github.com/dlmgo/dlm/cmd/dlm\n")
	assert.Contains(t, text, "library github.com/dlmgo/dlm ", "the library's version, a module of its own")
	assert.Contains(t, text, "revision ")
}

// The package table (docs/usage.md) names every subcommand.
func TestPackageTableListsEveryCommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/usage.md")
	require.NoError(t, err)
	var row string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| `cmd/dlm` |") {
			row = l
		}
	}
	require.NotEmpty(t, row, "docs/usage.md's package table has no row for cmd/dlm")
	for name := range commands {
		assert.Contains(t, row, "`"+name+"`")
	}
	assert.Contains(t, row, "`help`")
}

// A master name no Sentinel knows: dlm run says so at once, whatever
// --wait allows.
func TestRunUnknownMasterName(t *testing.T) {
	t.Parallel()
	sentinel := redistest.StartSentinel(t, "mymaster", redistest.Start(t), 1, 5*time.Second)
	code, out := runDLM(t, "run", "--url", "sentinel://"+sentinel.Addr+"/nosuchmaster", "--key", "k", "--wait", "10m", "--", "true")
	assert.Equal(t, exitNotLocked, code, out)
	assert.Contains(t, out, `no Sentinel knows the master name "nosuchmaster"`)
}
