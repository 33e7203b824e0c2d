package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// A cron line on several hosts: three runs of one job started 0.5s apart
// with --wait 0 and --hold-at-least 3s. The first runs its 0.1s command
// and leaves the key to expire 3s after its grant (the server's TTL says
// so); the others exit 75 without running it. Once the key has expired, a
// fourth runs.
func TestRunHoldAtLeast(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "single://" + srv.Addr
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := context.Background()
	lockKey, _ := strategy.Keys("cron")
	const hold = 3 * time.Second
	log := filepath.Join(t.TempDir(), "log")
	job := func() *exec.Cmd {
		return exec.Command(dlmBin, "run", "--url", url, "--key", "cron", "--wait", "0", "--hold-at-least", hold.String(),
			"--", "sh", "-c", `echo "ran $DLM_FENCE" >> `+log+`; sleep 0.1`)
	}
	type run struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	var runs []*run
	for i := range 3 {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		r := &run{cmd: job()}
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		require.NoError(t, r.cmd.Start())
		runs = append(runs, r)
	}
	codes := make([]int, len(runs))
	for i, r := range runs {
		err := r.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			codes[i] = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
	}
	// The holder exited long before its hold ends: the key is still there,
	// left to expire within the hold.
	left, err := rc.PTTL(ctx, lockKey).Result()
	require.NoError(t, err)
	assert.True(t, left > 0 && left <= hold, "the lock key's PTTL after the runs: %v, want within (0, %v]", left, hold)
	assert.Equal(t, []int{0, exitNotLocked, exitNotLocked}, codes, "exit statuses:\n%s\n%s\n%s", &runs[0].out, &runs[1].out, &runs[2].out)
	for _, r := range runs[1:] {
		assert.Contains(t, r.out.String(), "could not lock")
	}
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "ran 1\n", string(b), "the command ran once")

	require.Eventually(t, func() bool { return rc.Exists(ctx, lockKey).Val() == 0 }, 2*hold, 10*time.Millisecond, "the key expires")
	code, out := runDLM(t, "run", "--url", url, "--key", "cron", "--wait", "0", "--", "sh", "-c", `echo "ran $DLM_FENCE" >> `+log)
	assert.Equal(t, 0, code, out)
	b, err = os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "ran 1\nran 2\n", string(b))
}

// A hold the configuration cannot keep is refused before anything is taken.
func TestRunHoldAtLeastRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--hold-at-least", "-1s"},
		{"--hold-at-least", "2m", "--max-hold", "1m"},
		{"--hold-at-least", "25h"},
	} {
		code, out := runDLM(t, append(append([]string{"run", "--url", "single://127.0.0.1:1", "--key", "k"}, args...), "--", "true")...)
		assert.Equal(t, 2, code, "%v: %s", args, out)
		assert.Contains(t, out, "--hold-at-least", "%v", args)
	}
}
