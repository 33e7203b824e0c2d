package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// A background is a dlm process started by startDLM.
type background struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed once it exited; then err is its Wait error
	err  error
}

// startDLM starts the binary with args; it is killed when the test ends or
// when this process dies.
func startDLM(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{cmd: exec.Command(dlmBin, args...), out: &lockedBuffer{}, done: make(chan struct{})}
	b.cmd.Env = append(os.Environ(), "DLM_URL=")
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	require.NoError(t, b.cmd.Start())
	go func() { b.err = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// wait waits (up to d) until the process exits and returns its Wait error.
func (b *background) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-b.done:
		return b.err
	case <-time.After(d):
		t.Fatalf("%v still runs after %v; output:\n%s", b.cmd.Args, d, b.out.String())
		return nil
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// span is when one COMMAND ran, as it wrote it down (Unix ns).
type span struct{ start, end int64 }

// recordSpan is a COMMAND that writes its start and end times to dir.
func recordSpan(dir string, d time.Duration) []string {
	return []string{"sh", "-c", fmt.Sprintf(`f=%s/$$; date +%%s%%N > $f.s; sleep %v; date +%%s%%N > $f.e`, dir, d.Seconds())}
}

func readSpans(t *testing.T, dir string) []span {
	t.Helper()
	starts, err := filepath.Glob(filepath.Join(dir, "*.s"))
	require.NoError(t, err)
	var spans []span
	for _, s := range starts {
		read := func(f string) int64 {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			require.NoError(t, err)
			return n
		}
		spans = append(spans, span{read(s), read(strings.TrimSuffix(s, ".s") + ".e")})
	}
	return spans
}

// mostAtOnce is the largest number of spans that overlap.
func mostAtOnce(spans []span) int {
	most := 0
	for _, a := range spans {
		n := 0
		for _, b := range spans {
			if b.start <= a.start && a.start < b.end {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// TestRunPermits: three dlm run on a semaphore of two permits: two run at
// once, never three.
func TestRunPermits(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	dir := t.TempDir()
	var cmds []*background
	for range 3 {
		cmd := startDLM(t, append([]string{"run", "--url", url, "--key", "sem", "--permits", "2", "--wait", "20s", "--"}, recordSpan(dir, 700*time.Millisecond)...)...)
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		require.NoError(t, c.wait(t, 30*time.Second))
	}
	spans := readSpans(t, dir)
	require.Len(t, spans, 3)
	assert.Equal(t, 2, mostAtOnce(spans), "%v", spans)
}

// TestRunReadersAndWriter: readers run side by side; a writer runs alone.
func TestRunReadersAndWriter(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	readers, writers := t.TempDir(), t.TempDir()
	var cmds []*background
	for range 2 {
		cmd := startDLM(t, append([]string{"run", "--url", url, "--key", "doc", "--readers", "4", "--shared", "--wait", "20s", "--"}, recordSpan(readers, 800*time.Millisecond)...)...)
		cmds = append(cmds, cmd)
	}
	time.Sleep(300 * time.Millisecond)
	cmd := startDLM(t, append([]string{"run", "--url", url, "--key", "doc", "--readers", "4", "--wait", "20s", "--"}, recordSpan(writers, 200*time.Millisecond)...)...)
	cmds = append(cmds, cmd)
	for _, c := range cmds {
		require.NoError(t, c.wait(t, 30*time.Second))
	}
	r, w := readSpans(t, readers), readSpans(t, writers)
	require.Len(t, r, 2)
	require.Len(t, w, 1)
	assert.Equal(t, 2, mostAtOnce(r), "readers share: %v", r)
	for _, s := range r {
		assert.True(t, w[0].start >= s.end || w[0].end <= s.start, "the writer %v ran beside a reader %v", w[0], s)
	}
}

// TestElect: two dlm elect on one election: one leads at a time, with terms
// that grow; when the leader is killed (SIGKILL, with its COMMAND) the
// other leads within the TTL and a little.
func TestElect(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	dir := t.TempDir()
	elect := func(value string) *background {
		return startDLM(t, "elect", "--url", url, "--name", "jobs", "--ttl", "1s", "--value", value, "--",
			"sh", "-c", `echo "$DLM_TERM $DLM_VALUE $(date +%s%N)" > `+dir+`/$DLM_VALUE; exec sleep 60`)
	}
	a := elect("a")
	waitFile := func(name string, within time.Duration) []string {
		var b []byte
		require.Eventually(t, func() bool {
			var err error
			b, err = os.ReadFile(filepath.Join(dir, name))
			return err == nil && bytes.HasSuffix(b, []byte("\n"))
		}, within, 5*time.Millisecond, "%s never led", name)
		return strings.Fields(string(b))
	}
	first := waitFile("a", 10*time.Second)
	elect("b")
	time.Sleep(300 * time.Millisecond)
	_, err := os.Stat(filepath.Join(dir, "b"))
	require.True(t, os.IsNotExist(err), "b led while a did")
	killed := time.Now()
	require.NoError(t, a.cmd.Process.Kill())
	second := waitFile("b", 5*time.Second)
	at, err := strconv.ParseInt(second[2], 10, 64)
	require.NoError(t, err)
	took := time.Unix(0, at).Sub(killed)
	t.Logf("a killed; b leads %v later", took.Round(time.Millisecond))
	assert.Less(t, took, 5*time.Second, "b led only %v after a was killed (TTL 1s): it should lead once a's lease ends", took)
	t1, _ := strconv.ParseUint(first[0], 10, 64)
	t2, _ := strconv.ParseUint(second[0], 10, 64)
	assert.Greater(t, t2, t1, "terms grow")
}

func TestFamilyUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--key", "k", "--permits", "-1", "--url", "single://127.0.0.1:1", "--", "true"}, "positive count"},
		{[]string{"run", "--key", "k", "--permits", "2", "--readers", "2", "--url", "single://127.0.0.1:1", "--", "true"}, "not both"},
		{[]string{"run", "--key", "k", "--shared", "--url", "single://127.0.0.1:1", "--", "true"}, "--shared needs --readers"},
		{[]string{"run", "--key", "k", "--permits", "5000", "--url", "single://127.0.0.1:1", "--", "true"}, "permits must be in"},
		{[]string{"elect", "--url", "single://127.0.0.1:1", "--", "true"}, "--name is required"},
		{[]string{"elect", "--name", "n", "--url", "single://127.0.0.1:1"}, "no command given"},
		{[]string{"elect", "--name", "n", "--url", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--", "true"}, "more than one deployment"},
		{[]string{"elect", "--name", "n", "--value", strings.Repeat("v", 257), "--url", "single://127.0.0.1:1", "--", "true"}, "at most 256"},
	} {
		code, out := runDLM(t, tc.args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, out)
		assert.Contains(t, out, tc.want, tc.args)
	}
}

// holdUntil starts n dlm run with flags on key whose COMMAND holds until
// the file release exists, and returns them once all hold.
func holdUntil(t *testing.T, n int, url, key, release string, flags ...string) []*background {
	t.Helper()
	dir := t.TempDir()
	var bs []*background
	for range n {
		args := append([]string{"run", "--url", url, "--key", key, "--wait", "20s"}, flags...)
		args = append(args, "--", "sh", "-c", "touch "+dir+"/$$; while [ ! -e "+release+" ]; do sleep 0.02; done")
		bs = append(bs, startDLM(t, args...))
	}
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "*"))
		return len(m) == n
	}, 20*time.Second, 10*time.Millisecond, "the holders never all held")
	return bs
}

// tryOnce reports whether one attempt (dlm run --wait 0, a single TryLock)
// takes each of the plain locks keys.
func tryOnce(t *testing.T, url string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		code, out := runDLM(t, "run", "--url", url, "--key", k, "--wait", "0", "--", "true")
		assert.Equal(t, 0, code, "%s is still held: %s", k, out)
	}
}

// A writer or a reader of a read-write lock that gives up (--wait passed)
// gives back what it took before dlm exits: once the readers that held are
// gone, the gate and every permit are free at the first attempt.
func TestRunGivingUpReleases(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	permits := func(name string, n int) []string {
		keys := []string{name + ":gate"}
		for i := range n {
			keys = append(keys, name+":read:permit:"+strconv.Itoa(i))
		}
		return keys
	}
	t.Run("writer", func(t *testing.T) {
		release := filepath.Join(t.TempDir(), "release")
		readers := holdUntil(t, 2, url, "w", release, "--readers", "4", "--shared")
		code, out := runDLM(t, "run", "--url", url, "--key", "w", "--readers", "4", "--wait", "1s", "--", "true")
		require.Equal(t, exitNotLocked, code, out)
		require.NoError(t, os.WriteFile(release, nil, 0o644))
		for _, r := range readers {
			require.NoError(t, r.wait(t, 10*time.Second), r.out.String())
		}
		tryOnce(t, url, permits("w", 4)...)
	})
	t.Run("reader", func(t *testing.T) {
		release := filepath.Join(t.TempDir(), "release")
		readers := holdUntil(t, 1, url, "r", release, "--readers", "1", "--shared")
		code, out := runDLM(t, "run", "--url", url, "--key", "r", "--readers", "1", "--shared", "--wait", "1s", "--", "true")
		require.Equal(t, exitNotLocked, code, out)
		require.NoError(t, os.WriteFile(release, nil, 0o644))
		require.NoError(t, readers[0].wait(t, 10*time.Second), readers[0].out.String())
		tryOnce(t, url, permits("r", 1)...)
	})
}

// A --permits or --readers count other than that of the key's other users
// is refused (exit 2, with a message saying so), not admitted beside them.
func TestRunMismatchedCountRefused(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	release := filepath.Join(t.TempDir(), "release")
	holders := holdUntil(t, 2, url, "sem", release, "--permits", "2")
	holdUntil(t, 1, url, "doc", release, "--readers", "4", "--shared")
	for _, flags := range [][]string{{"--permits", "3"}, {"--readers", "3", "--shared"}, {"--readers", "3"}} {
		key := "sem"
		if flags[0] == "--readers" {
			key = "doc"
		}
		args := append([]string{"run", "--url", url, "--key", key, "--wait", "1m"}, flags...)
		code, out := runDLM(t, append(args, "--", "echo", "ran")...)
		assert.Equal(t, 2, code, "%v: %s", flags, out)
		assert.Contains(t, out, "differs", flags)
		assert.NotContains(t, out, "ran\n", flags)
	}
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for _, h := range holders {
		require.NoError(t, h.wait(t, 10*time.Second), h.out.String())
	}
}

// On a Redis Cluster the record of the number of permits has its own hash
// slot (the permits are spread over the masters): a mismatch is refused
// there too.
func TestRunMismatchedCountRefusedCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	url := "cluster://" + nodes[0].Addr
	release := filepath.Join(t.TempDir(), "release")
	holders := holdUntil(t, 2, url, "csem", release, "--permits", "2")
	code, out := runDLM(t, "run", "--url", url, "--key", "csem", "--permits", "3", "--wait", "1m", "--", "echo", "ran")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "3 here, 2 recorded")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for _, h := range holders {
		require.NoError(t, h.wait(t, 10*time.Second), h.out.String())
	}
}
