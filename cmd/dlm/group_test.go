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
	t.Parallel()
	srv := redistest.Start(t)
	url := "single://" + srv.Addr + "?timeout=200ms"
	// SIGTERM comes a grace (2s, a third of the TTL) before the validity
	// ends, so the group is gone well inside the 6s lease that the last
	// renewal before the freeze granted. The time is the subject: the
	// group must be gone before the lease could pass to another holder,
	// and the grace is what a loaded machine may spend of it (with a 1s
	// grace, two busy loops beside the race detector took 3.2s of 3s).
	cmd, out, pid := startWithGrandchild(t, url, "group-lost", "--ttl", "6s", "--grace", "2s")
	srv.Freeze(t) // renewals fail: the lease runs out
	frozen := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), out.String())
	assert.False(t, alive(pid), "the grandchild outlived the lost lock")
	assert.Less(t, time.Since(frozen), 6*time.Second, "stopped within the lease (6s TTL) whose last renewal came before the freeze")
	srv.Thaw(t)
	code, text := runDLM(t, "run", "--url", url, "--key", "group-lost", "--wait", "5s", "--", "true")
	assert.Equal(t, 0, code, text)
}

// dlm killed with SIGKILL: the group dies with it, before the lease could
// pass to anyone else.
func TestRunKilledTakesTheGroupAlong(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	cmd, _, pid := startWithGrandchild(t, url, "group-killed", "--ttl", "2s")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed := time.Now()
	require.Eventually(t, func() bool { return !alive(pid) }, 2*time.Second, 5*time.Millisecond,
		"the grandchild outlived dlm by the lease's TTL (2s)")
	t.Logf("the grandchild died %v after dlm", time.Since(killed).Round(time.Millisecond))

	start := time.Now()
	code, text := runDLM(t, "run", "--url", url, "--key", "group-killed", "--wait", "10s", "--", "true")
	assert.Equal(t, 0, code, text)
	assert.Greater(t, time.Since(start), 500*time.Millisecond, "the next holder waited for the lease to run out")
}

// What COMMAND leaves running in its group is killed, and confirmed gone,
// before the lock is released.
func TestRunLeftoversKilledBeforeUnlock(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	pidFile := filepath.Join(t.TempDir(), "pid")
	code, text := runDLM(t, "run", "--url", url, "--key", "leftover", "--", "sh", "-c", "sleep 60 & echo $! > "+pidFile)
	require.Equal(t, 0, code, text)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.False(t, alive(pid), "a background process of COMMAND outlived the lock")
}

// A TTL too short to stop COMMAND within the lease is refused before any
// connection; Ctrl-C while waiting exits 130.
func TestRunExitCodes(t *testing.T) {
	t.Parallel()
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

// A firstGroup is a dlm run whose COMMAND (a shell, the group's leader)
// started a background sleep and waits.
type firstGroup struct {
	dlm              *exec.Cmd
	out              *bytes.Buffer
	leader, grandkid int
	pids             []int // every pid COMMAND wrote
}

// startFirstGroup starts dlm (the binary at bin) run on key with such a
// COMMAND and returns once COMMAND wrote both pids.
func startFirstGroup(t *testing.T, bin, url, key string, flags ...string) firstGroup {
	return startScriptGroup(t, bin, url, key, "sleep 60 & echo $$ $! > %s; wait", 2, flags...)
}

// startScriptGroup starts dlm (the binary at bin) run on key with COMMAND
// sh -c script, script's %s the name of a file to which it writes n pids
// on one line, and returns once it did.
func startScriptGroup(t *testing.T, bin, url, key, script string, n int, flags ...string) firstGroup {
	t.Helper()
	return startScriptGroupAttr(t, nil, bin, url, key, script, n, flags...)
}

// startScriptGroupAttr is startScriptGroup with dlm started with attr.
func startScriptGroupAttr(t *testing.T, attr *syscall.SysProcAttr, bin, url, key, script string, n int, flags ...string) firstGroup {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pids")
	args := append([]string{"run", "--url", url, "--key", key}, flags...)
	args = append(args, "--", "sh", "-c", fmt.Sprintf(script, pidFile))
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = attr
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var pids []int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				return false
			}
			pids = append(pids, p)
		}
		return len(pids) == n
	}, 10*time.Second, 10*time.Millisecond, "COMMAND never wrote its pids: %s", &out)
	t.Cleanup(func() {
		for _, p := range pids {
			if alive(p) {
				_ = syscallKill(p)
			}
		}
	})
	g := firstGroup{dlm: cmd, out: &out, pids: pids, leader: pids[0]}
	if n > 1 {
		g.grandkid = pids[1]
	}
	return g
}

// childrenOf returns the pids whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var kids []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:]) // state ppid ...
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			p, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(d, "/proc/"), "/")[0])
			kids = append(kids, p)
		}
	}
	return kids
}

// secondHolder runs dlm run on key with a COMMAND that fails (exit 9,
// "OVERLAP") when any of the first group's processes still runs, and
// returns its exit code and output.
func secondHolder(t *testing.T, url, key string, g firstGroup) (int, string) {
	t.Helper()
	pids := strings.Trim(fmt.Sprint(g.pids), "[]")
	// Each process's stat is read once: one that was a zombie when
	// tested may be reaped, and its stat gone, before a second read (seen
	// under load).
	check := fmt.Sprintf(`for p in %s; do s=$(cat /proc/$p/stat 2>/dev/null) || continue; case "$s" in *") Z "*) ;; *) echo "OVERLAP $p"; exit 9 ;; esac; done; echo clean`, pids)
	return runDLM(t, "run", "--url", url, "--key", key, "--wait", "20s", "--", "sh", "-c", check)
}

// The supervisor between dlm and COMMAND killed with SIGKILL (what the OOM
// killer does): dlm stops COMMAND's whole group before it releases the
// lock, so the next holder finds nothing of it running.
func TestRunSupervisorKilled(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	g := startFirstGroup(t, dlmBin, url, "sup-killed", "--ttl", "2s")
	sups := childrenOf(t, g.dlm.Process.Pid)
	require.Len(t, sups, 1, "dlm run's supervisor")
	require.NoError(t, syscall.Kill(sups[0], syscall.SIGKILL))
	code, text := secondHolder(t, url, "sup-killed", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
	_ = g.dlm.Wait()
	assert.Contains(t, g.out.String(), "supervisor was killed")
	assert.False(t, alive(g.leader) || alive(g.grandkid), "the first group outlived dlm")
}

// dlm killed with SIGKILL: its supervisor stops the group, and the lock,
// never released, passes on only when its lease ends; the next holder
// finds nothing of the group running.
func TestRunKilledSecondHolder(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	g := startFirstGroup(t, dlmBin, url, "dlm-killed", "--ttl", "1s")
	require.NoError(t, g.dlm.Process.Kill())
	code, text := secondHolder(t, url, "dlm-killed", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
}

// The dlm binary replaced or deleted on disk while dlm run waits for the
// lock: the supervisor is still the binary dlm runs from, and COMMAND runs.
func TestRunBinaryReplaced(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	for _, tc := range []struct {
		name    string
		replace func(path string) error
	}{
		{"replaced", func(path string) error {
			if err := os.WriteFile(path+".new", []byte("#!/bin/sh\necho replaced binary ran; exit 42\n"), 0o755); err != nil {
				return err
			}
			return os.Rename(path+".new", path)
		}},
		{"deleted", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "dlm")
			b, err := os.ReadFile(dlmBin)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(bin, b, 0o755))
			key := "replaced-" + tc.name
			gate, holding := filepath.Join(dir, "go"), filepath.Join(dir, "holding")
			holder := startDLM(t, "run", "--url", url, "--key", key, "--", "sh", "-c", "touch "+holding+"; while [ ! -e "+gate+" ]; do sleep 0.02; done")
			require.Eventually(t, func() bool {
				_, err := os.Stat(holding)
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "the holder never held: %s", holder.out)
			waiter := exec.Command(bin, "run", "--url", url, "--key", key, "--wait", "20s", "--", "sh", "-c", `echo "ran fence=$DLM_FENCE"`)
			var out bytes.Buffer
			waiter.Stdout, waiter.Stderr = &out, &out
			require.NoError(t, waiter.Start()) // returns once bin was exec'd
			t.Cleanup(func() { _ = waiter.Process.Kill(); _ = waiter.Wait() })
			require.NoError(t, tc.replace(bin))
			require.NoError(t, os.WriteFile(gate, nil, 0o644))
			require.NoError(t, holder.wait(t, 10*time.Second), holder.out.String())
			require.NoError(t, waiter.Wait(), out.String())
			assert.Contains(t, out.String(), "ran fence=")
			assert.NotContains(t, out.String(), "replaced binary ran")
		})
	}
}

// dlm and its supervisor killed at once (stopped first, so that neither
// acts before both die): the watchdog in COMMAND's group kills the group,
// and the next holder, after the lease, finds nothing of it running.
func TestRunKilledWithSupervisor(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	g := startFirstGroup(t, dlmBin, url, "both-killed", "--ttl", "1s")
	sups := childrenOf(t, g.dlm.Process.Pid)
	require.Len(t, sups, 1, "dlm run's supervisor")
	for _, p := range []int{g.dlm.Process.Pid, sups[0]} {
		require.NoError(t, syscall.Kill(p, syscall.SIGSTOP))
	}
	for _, p := range []int{g.dlm.Process.Pid, sups[0]} {
		require.NoError(t, syscall.Kill(p, syscall.SIGKILL))
	}
	code, text := secondHolder(t, url, "both-killed", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
}

// A supervisor that cannot act (stopped) when the lease ends: dlm kills
// COMMAND's group itself, then the supervisor, and exits as having lost
// the lock; the next holder finds nothing of the group running.
func TestRunSupervisorStopped(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	// The lease ends at the maximum hold time, 3s: time enough for a loaded
	// machine to find and stop the supervisor first (with 500ms it had
	// acted and gone before the test stopped it).
	g := startFirstGroup(t, dlmBin, url, "sup-stopped", "--ttl", "1s", "--max-hold", "3s", "--grace", "100ms")
	sups := childrenOf(t, g.dlm.Process.Pid)
	require.Len(t, sups, 1, "dlm run's supervisor")
	require.NoError(t, syscall.Kill(sups[0], syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(sups[0], syscall.SIGKILL) })
	code, text := secondHolder(t, url, "sup-stopped", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
	err := g.dlm.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, g.out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), g.out.String())
}

// dlm stopped (SIGSTOP: a debugger, a frozen cgroup, a VM pause) while it
// holds the lock: its renewals stop, and the watchdog kills COMMAND's group
// at the validity dlm last confirmed, so the next holder finds nothing of
// it running. Resumed, dlm reports the lock lost.
func TestRunDLMStopped(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	g := startFirstGroup(t, dlmBin, url, "dlm-stopped", "--ttl", "1s")
	require.NoError(t, syscall.Kill(g.dlm.Process.Pid, syscall.SIGSTOP))
	code, text := secondHolder(t, url, "dlm-stopped", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
	require.NoError(t, syscall.Kill(g.dlm.Process.Pid, syscall.SIGCONT))
	err := g.dlm.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, g.out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), g.out.String())
}

// Ctrl-Z: SIGTSTP to the terminal's foreground job, dlm's process group
// (dlm and its supervisor), while COMMAND, in a group of its own, runs on
// and the watchdog, in another, kills it at the lease's end. dlm runs in a
// group of its own whose parent, this test, is in another group of the
// same session, as a shell's job is: the kernel drops SIGTSTP sent to an
// orphaned process group.
func TestRunStoppedByCtrlZ(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	g := startScriptGroupAttr(t, &syscall.SysProcAttr{Setpgid: true}, dlmBin, url, "ctrl-z", "sleep 60 & echo $$ $! > %s; wait", 2, "--ttl", "1s")
	sups := childrenOf(t, g.dlm.Process.Pid)
	require.Len(t, sups, 1, "dlm run's supervisor")
	t.Cleanup(func() { _ = syscall.Kill(-g.dlm.Process.Pid, syscall.SIGCONT) })
	require.NoError(t, syscall.Kill(-g.dlm.Process.Pid, syscall.SIGTSTP))
	for _, p := range []int{g.dlm.Process.Pid, sups[0]} {
		require.Eventually(t, func() bool { return isStopped(p) }, 10*time.Second, 5*time.Millisecond, "SIGTSTP did not stop %d", p)
	}
	code, text := secondHolder(t, url, "ctrl-z", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
	require.NoError(t, syscall.Kill(-g.dlm.Process.Pid, syscall.SIGCONT))
	err := g.dlm.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, g.out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), g.out.String())
}

// dlm stopped while COMMAND has started a process outside its group
// (setsid): the watchdog kills that one too.
func TestRunDLMStoppedEscaped(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	g := startScriptGroup(t, dlmBin, url, "stopped-escaped", "setsid sleep 60 & echo $$ $! > %s; wait", 2, "--ttl", "1s")
	require.NoError(t, syscall.Kill(g.dlm.Process.Pid, syscall.SIGSTOP))
	code, text := secondHolder(t, url, "stopped-escaped", g)
	assert.Equal(t, 0, code, text)
	assert.Contains(t, text, "clean")
}

// COMMAND starts a process that leaves its group and exits, leaving it
// running: setsid in the background, and a double fork (the process's
// parent exits at once, so that it is orphaned while COMMAND still runs).
// dlm, the orphan's new parent, kills and reaps it before it releases the
// lock, so a holder waiting for the lock finds nothing of it running.
func TestRunEscapedProcess(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	for _, tc := range []struct{ name, script string }{
		{"setsid", "setsid sleep 60 & echo $! > %[1]s; sleep 0.5"},
		{"double-fork", `sh -c 'setsid sleep 60 & echo $! > %[1]s'; sleep 0.5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "escaped-" + tc.name
			g := startScriptGroup(t, dlmBin, url, key, tc.script, 1)
			code, text := secondHolder(t, url, key, g)
			assert.Equal(t, 0, code, text)
			assert.Contains(t, text, "clean")
			require.NoError(t, g.dlm.Wait(), g.out.String())
			assert.False(t, alive(g.pids[0]), "the escaped process outlived dlm run")
		})
	}
}

// The supervisor stopped while COMMAND ends: it cannot report the exit, so
// dlm finds the group empty, kills the supervisor, reaps COMMAND itself and
// exits with its status, releasing the lock instead of renewing it for a
// command that no longer runs.
func TestRunSupervisorStoppedCommandEnds(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	gate := filepath.Join(t.TempDir(), "gate")
	g := startScriptGroup(t, dlmBin, url, "sup-stopped-ends", "echo $$ > %s; while [ ! -e "+gate+" ]; do sleep 0.02; done; exit 7", 1)
	sups := childrenOf(t, g.dlm.Process.Pid)
	require.Len(t, sups, 1, "dlm run's supervisor")
	require.NoError(t, syscall.Kill(sups[0], syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(sups[0], syscall.SIGKILL) })
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	done := make(chan error, 1)
	go func() { done <- g.dlm.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, g.out.String())
		assert.Equal(t, 7, ee.ExitCode(), g.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("dlm run still holds the lock 30s after COMMAND ended: %s", g.out)
	}
	code, text := runDLM(t, "run", "--url", url, "--key", "sup-stopped-ends", "--", "true")
	assert.Equal(t, 0, code, "released: %s", text)
}

// isStopped reports whether pid is stopped (state T).
func isStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}
