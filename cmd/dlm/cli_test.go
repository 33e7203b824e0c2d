package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm/strategy"

	"github.com/redis/go-redis/v9"
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
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	code, out := runDLM(t, "run", "--url", url, "--key", "job", "--", "sh", "-c", `echo "key=$DLM_KEY fence=$DLM_FENCE"; exit 3`)
	assert.Equal(t, 3, code, out)
	assert.Contains(t, out, "key=job fence=1")
	code, out = runDLM(t, "run", "--url", url, "--key", "job", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "fence=2", "released after the first run, and the fence moved on")
}

// raceRun starts n dlm run processes for one key at once; each appends
// "start FENCE" and "end FENCE" to a file around a pause, under the lock. It
// checks that the pairs never interleave and that the fences increase, and
// returns the fences in the order the processes held the lock.
func raceRun(t *testing.T, n int, url string) []int {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $DLM_FENCE" >> ` + log + `; sleep 0.3; echo "end $DLM_FENCE" >> ` + log
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range n {
		c := exec.Command(dlmBin, "run", "--url", url, "--key", "race", "--wait", "30s", "--", "sh", "-c", script)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		require.NoError(t, c.Start())
		cmds, outs = append(cmds, c), append(outs, &out)
	}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), outs[i].String())
	}
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2*n, string(b))
	var fences []int
	for i := 0; i < len(lines); i += 2 {
		// Every start is followed by the end of the same holder.
		start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		require.Len(t, start, 2, string(b))
		require.Len(t, end, 2, string(b))
		require.Equal(t, []string{"start", "end", start[1]}, []string{start[0], end[0], end[1]}, "overlapping holders:\n%s", b)
		f, err := strconv.Atoi(start[1])
		require.NoError(t, err, string(b))
		if len(fences) > 0 {
			require.Greater(t, f, fences[len(fences)-1], "fences must increase:\n%s", b)
		}
		fences = append(fences, f)
	}
	return fences
}

func TestRunRacingProcesses(t *testing.T) {
	t.Parallel()
	raceRun(t, 2, "single://"+redistest.Start(t).Addr)
}

// Two processes racing for one key over Redlock on three real servers.
func TestRunRedlockRacingProcesses(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
	// A generous per-node timeout: the machine running the tests may be loaded.
	url := "redlock://" + strings.Join(addrs, ",") + "?timeout=2s&ttl=3s"
	fences := raceRun(t, 2, url)
	// A majority holds the last fence (Redlock returns once a quorum
	// granted: on a loaded machine the third node's call may not have run
	// before the process exited), and no node holds a larger one.
	ctx := context.Background()
	last, holding := fences[len(fences)-1], 0
	for _, s := range servers {
		v, err := s.Client(t).Get(ctx, fenceOf("race")).Int()
		if errors.Is(err, redis.Nil) {
			continue
		}
		require.NoError(t, err)
		assert.LessOrEqual(t, v, last, s.Addr)
		if v == last {
			holding++
		}
	}
	assert.GreaterOrEqual(t, holding, 2, "nodes holding the last fence %d", last)
}

// A Sentinel deployment whose Sentinels require a password: dlm run finds
// the primary through Sentinel, takes the lock acknowledged by the replica,
// and passes the fence; dlm doctor checks the primary and the replica it
// found, and dlm demo runs on it.
func TestSentinelDeployment(t *testing.T) {
	t.Parallel()
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1, SentinelPassword: "s3ntinel"})
	noAuth := "sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + topo.Master + "?ack=all&replicas=1&wait_timeout=1s"
	url := noAuth + "&sentinel_password=s3ntinel"

	code, out := runDLM(t, "doctor", "--url", noAuth)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail "+topo.Sentinels[0].Addr+": NOAUTH")

	code, out = runDLM(t, "run", "--url", url, "--key", "s", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "fence=1")
	// The lock and its fence reached the replica before the command ran.
	assert.Equal(t, "1", topo.Replicas[0].Client(t).Get(context.Background(), fenceOf("s")).Val())

	code, out = runDLM(t, "doctor", "--url", url)
	assert.Equal(t, 1, code, out) // no AOF
	assert.Contains(t, out, topo.Primary.Addr+" (primary)")
	assert.Contains(t, out, topo.Replicas[0].Addr+" (replica)")
	assert.Contains(t, out, "ok   "+topo.Sentinels[0].Addr+": primary "+topo.Primary.Addr)
	assert.Contains(t, out, "ok   ack all: 1 acknowledgement(s) per lock from 1 connected replica(s)")
	assert.Contains(t, out, "ok   link to the primary up")
	assert.Contains(t, out, "warn 1 Sentinel(s) in the config")

	// ack=2 cannot be met by one replica: doctor says so.
	code, out = runDLM(t, "doctor", "--url", strings.Replace(url, "ack=all", "ack=2", 1))
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail ack 2, but 1 replica(s) connected")

	var dout, derr bytes.Buffer
	code = run(context.Background(), []string{"demo", "--url", url, "--duration", "1s", "--workers", "3"}, &dout, &derr)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", dout.String(), derr.String())
	assert.Contains(t, dout.String(), "dlm demo: failover strategy, sentinel://")
	assert.NotContains(t, dout.String()+derr.String(), "s3ntinel", "the demo redacts the Sentinel password")
	assert.Contains(t, dout.String(), "most holders at once    1 (must be 1)")
	assert.Contains(t, dout.String(), "strictly increasing: yes")
}

// Configuration errors exit 2 with a message naming the field, whichever way
// the configuration comes.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"strategy":"redlock","addrs":["127.0.0.1:1"],"max_hold":"forever"}`), 0o644))
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"run", "--key", "k", "--url", "redlock://127.0.0.1:1,127.0.0.1:2?ack=all", "--", "true"}, want: "ack: applies only to the failover strategy"},
		{args: []string{"run", "--key", "k", "--config", bad, "--", "true"}, want: `max_hold: "forever" is not a duration`},
		{args: []string{"run", "--key", "k", "--", "true"}, env: "DLM_URL=sentinel://127.0.0.1:1/m?ack=most", want: `ack: ack policy "most"`},
		{args: []string{"doctor", "--url", "single://127.0.0.1:1?replicas=2"}, want: "replicas: applies only to the failover strategy"},
		{args: []string{"doctor", "--config", filepath.Join(dir, "missing.json")}, want: "missing.json"},
		{args: []string{"demo", "--url", "failover://127.0.0.1:1,127.0.0.1:2"}, want: "addrs: failover without master"},
		{args: []string{"demo", "--url", "single://127.0.0.1:1", "--addr", "127.0.0.1:1"}, want: "cannot be combined"},
		// Every usage or configuration error exits 2 before connecting.
		{args: []string{"run", "--key", "k", "--url", "single://127.0.0.1", "--", "true"}, want: `"127.0.0.1": want host:port`},
		{args: []string{"run", "--key", "k", "--url", "single://::1:6379", "--", "true"}, want: "IPv6 host in brackets"},
		{args: []string{"run", "--key", "k", "--url", "redlock://127.0.0.1:1,127.0.0.1:70000,127.0.0.1:3", "--", "true"}, want: `"127.0.0.1:70000": want host:port`},
		{args: []string{"run", "--key", strings.Repeat("k", 1025), "--url", "single://127.0.0.1:1", "--", "true"}, want: "longer than MaxKeyLen"},
		{args: []string{"run", "--key", "k", "--ttl", "25h", "--url", "single://127.0.0.1:1", "--", "true"}, want: "at most 24h"},
		{args: []string{"run", "--key", "k", "--ttl", "100ms", "--url", "single://127.0.0.1:1", "--", "true"}, want: "too short"},
		// A count of 0 given explicitly is not the default "no count".
		{args: []string{"run", "--key", "k", "--permits", "0", "--url", "single://127.0.0.1:1", "--", "true"}, want: "--permits and --readers take a positive count"},
		{args: []string{"run", "--key", "k", "--readers=0", "--url", "single://127.0.0.1:1", "--", "true"}, want: "--permits and --readers take a positive count"},
	} {
		cmd := exec.Command(dlmBin, tc.args...)
		cmd.Env = append(os.Environ(), "DLM_URL=")
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", tc.args, out)
		assert.Equal(t, 2, ee.ExitCode(), "%v: %s", tc.args, out)
		assert.Contains(t, string(out), tc.want, tc.args)
	}
}

func TestRunHelpNamesTheFence(t *testing.T) {
	t.Parallel()
	code, out := runDLM(t, "run", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "DLM_FENCE")
	assert.Contains(t, out, "75  the lock could not be taken")
	assert.Contains(t, out, "76  the lock was lost")
	assert.Contains(t, out, "sentinel://")
}

func TestRunCouldNotLock(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// --max-hold bounds the renewal: the lease runs out and the command is
// stopped as for a lost lock.
func TestRunMaxHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	start := time.Now()
	code, out := runDLM(t, "run", "--url", "single://"+srv.Addr, "--key", "held", "--ttl", "600ms", "--max-hold", "1s",
		"--grace", "1s", "--", "sleep", "30")
	took := time.Since(start)
	assert.Equal(t, exitLost, code, out)
	assert.Contains(t, out, "lost the lock")
	assert.GreaterOrEqual(t, took, time.Second, "renewed until --max-hold")
	assert.Less(t, took, 10*time.Second, "the command was stopped, not left to run 30s")
}

// --on-lost ignore lets the command finish, with its own status.
func TestRunLockLostIgnored(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(dlmBin, "run", "--url", "single://"+srv.Addr, "--key", "lost", "--ttl", "600ms", "--on-lost", "ignore", "--",
		"sh", "-c", `touch `+ready+`; sleep 2; exit 5`)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Set(context.Background(), "dlm:{lost}", "thief", time.Minute).Err())
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, 5, ee.ExitCode(), out.String())
	assert.Contains(t, out.String(), "lost the lock")
}

// A server that stops answering: renewals fail until the lease runs out,
// and then the lock counts as lost.
func TestRunLockLostToSilentServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(dlmBin, "run", "--url", "single://"+srv.Addr+"?timeout=300ms", "--key", "silent", "--ttl", "1s", "--on-lost", "kill", "--",
		"sh", "-c", `touch `+ready+`; exec sleep 30`)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 10*time.Second, 10*time.Millisecond)
	srv.Freeze(t)
	defer srv.Thaw(t)
	start := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out.String())
	assert.Equal(t, exitLost, ee.ExitCode(), out.String())
	assert.Contains(t, out.String(), "lost the lock")
	assert.Less(t, time.Since(start), 20*time.Second, "killed when the lease ran out, not after 30s")
}

func TestRunConfigFileAndEnv(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "lock.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"strategy":"single","addrs":["`+srv.Addr+`"],"ttl":"7s"}`), 0o644))
	code, out := runDLM(t, "run", "--config", file, "--key", "f", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "fence=1")

	cmd := exec.Command(dlmBin, "run", "--key", "f", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
	cmd.Env = append(os.Environ(), "DLM_URL=single://"+srv.Addr)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	assert.Contains(t, string(b), "fence=2")
}

func TestRunSignalIsForwarded(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	assert.Contains(t, out, `"tll": unknown parameter`)
}

func TestDoctor(t *testing.T) {
	t.Parallel()
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

// Doctor on Redlock checks every master, and notices one server given under
// two names.
func TestDoctorRedlock(t *testing.T) {
	t.Parallel()
	safe := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	bare := redistest.Start(t)
	url := "redlock://" + safe.Addr + "," + bare.Addr + ",localhost:" + strconv.Itoa(bare.Port)
	code, out := runDLM(t, "doctor", "--url", url)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "redlock strategy")
	assert.Contains(t, out, "ok   AOF on with appendfsync always")
	assert.Contains(t, out, "warn AOF off: a restart loses this master's locks and fencing counters")
	assert.Contains(t, out, "fail the same server as "+bare.Addr)
}

// Doctor names what is wrong, and what to do, for the mistakes users make:
// a Sentinel's port as the server, a missing password, an unknown master
// name, too few or an even number of Redlock masters, a memory limit with
// noeviction.
func TestDoctorFindings(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "mymaster", primary, 1, 5*time.Second)
	secret := redistest.Start(t, "--requirepass", "pw")
	full := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "noeviction")
	for _, tc := range []struct {
		name, url, want string
	}{
		{"a Sentinel's port", "single://" + sentinel.Addr, "fail scripts refused"},
		{"no password", "single://" + secret.Addr, "fail authentication failed"},
		{"wrong password", "single://:nope@" + secret.Addr, "fail authentication failed"},
		{"unknown master", "sentinel://" + sentinel.Addr + "/nosuch", `knows no master named "nosuch"`},
		{"two masters", "redlock://" + primary.Addr + "," + full.Addr, "warn 2 master(s): the quorum is 2"},
		{"four masters", "redlock://" + primary.Addr + "," + full.Addr + "," + secret.Addr + ",localhost:1", "warn 4 masters tolerate no more failures than 3"},
		{"maxmemory with noeviction", "single://" + full.Addr, "warn maxmemory 10.00M with noeviction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runDLM(t, "doctor", "--timeout", "1s", "--url", tc.url)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out, tc.want)
		})
	}
}

// Each command's help says what it uses when no deployment is given: the
// demo its embedded nodes, the others the local default server.
func TestHelpNamesTheDefaultDeployment(t *testing.T) {
	t.Parallel()
	code, out := runDLM(t, "demo", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "else five embedded in-process nodes")
	assert.NotContains(t, out, "else "+defaultURL)
	code, out = runDLM(t, "doctor", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "else "+defaultURL)
}

// fenceOf returns the Redis key of key's fencing counter.
func fenceOf(key string) string {
	_, f := strategy.Keys(key)
	return f
}

// --url or --config given empty (--url "$REDIS_URL" with the variable not
// set) is refused with exit 2 by every command that takes them; it does not
// fall back to DLM_URL, here a live server, or the default.
func TestEmptyTargetFlagRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"run", "--url", "", "--key", "k", "--", "true"},
		{"run", "--url=", "--key", "k", "--", "true"},
		{"run", "--config", "", "--key", "k", "--", "true"},
		{"elect", "--url", "", "--name", "n", "--wait", "0", "--", "true"},
		{"doctor", "--url", ""},
		{"ls", "--url", ""},
		{"inspect", "--url", "", "k"},
		{"revoke", "--url", "", "--reason", "r", "k"},
		{"demo", "--url", "", "--duration", "100ms"},
		{"demo", "--config", "", "--duration", "100ms"},
	} {
		cmd := exec.Command(dlmBin, args...)
		cmd.Env = append(os.Environ(), "DLM_URL=single://"+srv.Addr)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%q: %s", args, out)
		assert.Equal(t, 2, ee.ExitCode(), "%q: %s", args, out)
		flagName := "--url"
		if slices.Contains(args, "--config") {
			flagName = "--config"
		}
		assert.Contains(t, string(out), flagName+" is empty (a variable that is not set?)", "%q", args)
	}
}

// A database the server does not have (?db=16 with the default 16
// databases) is a configuration error, exit 2 with advice, at once and over
// every driver, not "could not lock" (75) after --wait; dlm ls says the same,
// and doctor names it instead of blaming the password. A number Redis never
// takes (above 2^31-1) is refused when the URL is parsed.
func TestDBOutOfRange(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	u := "single://" + srv.Addr + "?db=16"
	for _, d := range []string{"goredis", "redigo", "rueidis", "valkeygo"} {
		code, out := runDLM(t, "run", "--driver", d, "--url", u, "--key", "k", "--wait", "50s", "--", "true")
		assert.Equal(t, 2, code, "%s: %s", d, out)
		assert.Contains(t, out, "ERR DB index is out of range\n  hint: db=16: the server has no such database", d)
	}
	code, out := runDLM(t, "ls", "--url", u)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "hint: db=16: the server has no such database")
	code, out = runDLM(t, "doctor", "--url", u)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail db=16: ERR DB index is out of range: the server has no such database")
	assert.NotContains(t, out, "authentication")
	code, out = runDLM(t, "run", "--url", "single://"+srv.Addr+"?db=99999999999", "--key", "k", "--", "true")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "db: 99999999999 is above 2147483647")
}

// No message of dlm quotes a user's input whole: a 100,000-character
// unknown URL parameter, flag value, flag name or command comes back as its
// first bytes and its length (exit 2 in every case).
func TestErrorsBoundTheirEchoes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100_000)
	for _, args := range [][]string{
		{"run", "--url", "single://127.0.0.1:1?" + long + "=1", "--key", "k", "--", "true"},
		{"run", "--url", "single://127.0.0.1:1?ttl=" + long, "--key", "k", "--", "true"},
		{"run", "--url", "single://127.0.0.1:1", "--on-lost", long, "--key", "k", "--", "true"},
		{"run", "--url", "single://127.0.0.1:1", "--ttl", long, "--key", "k", "--", "true"},
		{"run", "--" + long, "--key", "k", "--", "true"},
		{"doctor", "--driver", long},
		{"ls", "--url", "single://127.0.0.1:1", "[" + long},
		{"demo", "--strategy", long, "--addr", "127.0.0.1:1"},
		{long},
		{"help", long},
	} {
		cmd := exec.Command(dlmBin, args...)
		cmd.Env = append(os.Environ(), "DLM_URL=")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%.60q", args)
		assert.Equal(t, 2, ee.ExitCode(), "%.60q: %.500s", args, out)
		assert.NotContains(t, string(out), strings.Repeat("x", 1000), "%.60q", args)
		assert.Contains(t, string(out), "bytes)", "%.60q: %.500s", args, out)
	}
}
