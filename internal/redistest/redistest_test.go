package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMissingServerHelper is run in a subprocess by TestMissingServer, with
// a PATH where redis-server cannot be found.
func TestMissingServerHelper(t *testing.T) {
	if os.Getenv("REDISTEST_HELPER") != "1" {
		t.Skip("run by TestMissingServer")
	}
	Start(t)
	t.Log("started a server without redis-server on PATH")
}

func TestMissingServer(t *testing.T) {
	for _, tc := range []struct {
		require  string
		wantFail bool
	}{{"", false}, {"1", true}} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMissingServerHelper$", "-test.v")
		cmd.Env = SubprocessEnv(t, "PATH=/nonexistent", "REDISTEST_HELPER=1", RequireEnv+"="+tc.require)
		out, err := cmd.CombinedOutput()
		if tc.wantFail {
			assert.Error(t, err, "%s", out)
			assert.Contains(t, string(out), "--- FAIL")
			assert.Contains(t, string(out), RequireEnv+"=1 requires it")
		} else {
			assert.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "--- SKIP")
			assert.Contains(t, string(out), "redis-server not found on PATH")
		}
	}
}

func TestFreezeKillRestart(t *testing.T) {
	s := Start(t, "--appendonly", "yes", "--appendfsync", "always")
	c := s.Client(t)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	s.Freeze(t)
	assert.Error(t, ping(s.Addr), "a frozen server does not answer (ping waits 1s)")
	s.Thaw(t)
	require.NoError(t, ping(s.Addr))

	s.Kill(t)
	assert.Error(t, ping(s.Addr), "a killed server does not answer")
	s.Restart(t)
	v, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v, "AOF kept the data across the restart on the same port")
}

// TestServerDiesWithTestProcessHelper starts a server, prints its address
// and waits to be killed; run by TestServerDiesWithTestProcess.
func TestServerDiesWithTestProcessHelper(t *testing.T) {
	if os.Getenv("REDISTEST_HELPER") != "1" {
		t.Skip("run by TestServerDiesWithTestProcess")
	}
	s := Start(t)
	fmt.Printf("ADDR %s\n", s.Addr)
	time.Sleep(time.Minute)
}

// A test process killed outright (as a watchdog or a CI timeout does) runs
// no Cleanup: its servers must still end.
func TestServerDiesWithTestProcess(t *testing.T) {
	Binary(t, "redis-server")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerDiesWithTestProcessHelper$")
	cmd.Env = SubprocessEnv(t, "REDISTEST_HELPER=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	require.True(t, ok, "helper said %q", line)
	require.NoError(t, ping(addr), "the helper's server is up")

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for ping(addr) == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.Error(t, ping(addr), "the server outlived the test process that started it")
}

func TestClusterReplicas(t *testing.T) {
	cl := StartClusterReplicas(t, 1, 2)
	ctx := context.Background()
	for i, m := range cl.Masters {
		info, err := m.Client(t).Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("connected_slaves:%d\r\n", len(cl.Replicas[i])); !strings.Contains(info, want) {
			t.Errorf("master %d: want %q in %s", i, want, info)
		}
		for _, r := range cl.Replicas[i] {
			info, err := r.Client(t).Info(ctx, "replication").Result()
			if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, fmt.Sprintf("master_port:%d", m.Port)) {
				t.Errorf("replica %s of master %d: %v %s", r.Addr, i, err, info)
			}
		}
	}
}

// RefusedAddr's port refuses connections and cannot be taken by a server
// (nor by a listener with SO_REUSEADDR, as redis-server's and Go's are).
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took %s", addr)
	}
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	if s, err := Launch(Config{Dir: t.TempDir(), Ports: []int{p}}); err == nil {
		s.Stop() // nothing left running, whatever the verdict
		t.Fatalf("a redis-server started on %s", addr)
	}
}

// A port handed out is not handed out again while the process's block has
// others, even once nothing listens on it: a killed server's port stays
// its own.
func TestFreePortsTakeTurns(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := freePort("127.0.0.1")
		require.NoError(t, err)
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
	}
	if ports.first == 0 {
		t.Skip("no block of ports was free: the kernel picked these")
	}
	for p := range seen {
		assert.True(t, p >= ports.first && p < ports.first+portBlock, "port %d outside the block at %d", p, ports.first)
	}
}

// The block's lock outlives a garbage collection: the lock file's *os.File
// was once dropped, its finalizer closed it, and two test processes (four
// subprocesses of one conformance test, starting the same servers in the
// same order) took the same ports.
func TestBlockHeldAfterGC(t *testing.T) {
	_, err := freePort("127.0.0.1")
	require.NoError(t, err)
	if ports.first == 0 {
		t.Skip("no block of ports was free: the kernel picked the port")
	}
	runtime.GC()
	runtime.GC()
	f, err := os.Open(filepath.Join(lockDir(), fmt.Sprintf("redistest-ports-%d.lock", ports.first)))
	require.NoError(t, err)
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		t.Fatalf("the block at %d could be locked again after a GC: another process would share it", ports.first)
	}
}

// A server that cannot bind its port, because something else listens
// there, is not taken for started when that something answers PING: it
// was, and the test's CONFIG SET went to another process's server, which
// that process then stopped.
func TestLaunchSkipsAPortAnotherAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					_, _ = c.Write([]byte("+PONG\r\n"))
				}
			}()
		}
	}()
	taken := l.Addr().(*net.TCPAddr).Port
	s, err := Launch(Config{Dir: t.TempDir(), Ports: []int{taken, 0}})
	require.NoError(t, err)
	defer s.Stop()
	assert.NotEqual(t, taken, s.Port, "the server was taken to listen on a port another process holds")
	assert.NoError(t, ping(s.Addr))
}

// KillMaster's fallback promotes the replica where the Cluster cannot: with
// its only master dead, no master is left to vote, so only CLUSTER FAILOVER
// TAKEOVER (after takeoverAfter) makes the replica a master.
func TestKillMasterTakesOver(t *testing.T) {
	t.Parallel()
	cl := StartClusterReplicas(t, 1)
	rc := cl.Replicas[0][0].Client(t)
	cl.KillMaster(t, 0)
	ctx := context.Background()
	waitFor(t, takeoverAfter+30*time.Second, "the replica promoted", func() bool {
		role, err := rc.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
}
