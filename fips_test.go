package dlm_test

import (
	"context"
	"crypto/fips140"
	stdsha1 "crypto/sha1"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// fipsChildEnv marks the child process of TestFIPS140Only.
const fipsChildEnv = "DLM_TEST_FIPS140_CHILD"

// A program run with GODEBUG=fips140=only takes locks: the README's
// Example (the single strategy over package dlmtest) and a Redlock lock
// over three redis-servers through go-redis pass in a child process run
// with that setting, where crypto/sha1 panics (a script's SHA-1, only
// Redis's name for it, is computed without it). ./test.sh also runs
// GODEBUG=fips140=only go test -run Example . as issue 51 asks.
func TestFIPS140Only(t *testing.T) {
	t.Parallel() // its child process runs beside the other parallel tests
	if os.Getenv(fipsChildEnv) != "" {
		t.Skip("the child process runs the cases, not this test")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^(Example|TestLockUnderFIPS140Only)$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only", fipsChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child under GODEBUG=fips140=only:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: Example ", "the child ran the README's Example:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestLockUnderFIPS140Only ", "the child took a Redlock lock:\n%s", out)
}

// TestLockUnderFIPS140Only is the Redlock case of TestFIPS140Only, run in
// its child process.
func TestLockUnderFIPS140Only(t *testing.T) {
	if os.Getenv(fipsChildEnv) == "" {
		t.Skip("runs in TestFIPS140Only's child process, under GODEBUG=fips140=only")
	}
	require.True(t, fips140.Enabled(), "FIPS 140-3 mode is on")
	require.Panics(t, func() { stdsha1.Sum(nil) }, "crypto/sha1 is refused: fips140=only is in force")

	var nodes []driver.Node
	for _, s := range redistest.StartN(t, 3) {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, goredis.New(c))
	}
	r, err := strategy.NewRedlock(nodes)
	require.NoError(t, err)
	m, err := dlm.New(r, dlm.WithTTL(10*time.Second), dlm.WithAutoRenew(0.5, time.Hour))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := m.Lock(ctx, "fips")
	require.NoError(t, err)
	_, err = m.TryLock(ctx, "fips")
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	require.NoError(t, first.Extend(ctx, time.Minute))
	require.NoError(t, first.Unlock(ctx))
	second, err := m.Lock(ctx, "fips")
	require.NoError(t, err)
	assert.Greater(t, second.Fence(), first.Fence())
	require.NoError(t, second.Unlock(ctx))
}
