package harness

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm/conformance/internal/transport"
	"github.com/dlmgo/dlm/internal/redistest"
)

// startReplica starts a redis-server that replicates primary (directly,
// not through the fault point), waits until it acknowledges writes, and
// returns the function of transport.Transport.FreezeReplica.
func startReplica(t *testing.T, primary *redistest.Server, cfg config) func(on bool) error {
	t.Helper()
	// A replica's first full sync starts at once, not after the default 5s.
	if _, err := transport.Do(primary.Addr, 5*time.Second, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatalf("conformance/harness: configuring the server for its replica: %v", err)
	}
	replica := startServer(t, cfg)
	host, port, _ := net.SplitHostPort(primary.Addr)
	if _, err := transport.Do(replica.Addr, 5*time.Second, "REPLICAOF", host, port); err != nil {
		t.Fatalf("conformance/harness: starting the replica: %v", err)
	}
	if err := waitAcked(primary.Addr, 30*time.Second); err != nil {
		t.Fatalf("conformance/harness: the replica: %v", err)
	}
	frozen := false
	t.Cleanup(func() {
		if frozen {
			_ = replica.Signal(syscall.SIGCONT)
		}
	})
	return func(on bool) error {
		if on == frozen {
			return nil
		}
		sig := syscall.SIGSTOP
		if !on {
			sig = syscall.SIGCONT
		}
		if err := replica.Signal(sig); err != nil {
			return err
		}
		frozen = on
		if on {
			return nil
		}
		return waitAcked(primary.Addr, 30*time.Second)
	}
}

// waitAcked waits until a write to the server at addr is acknowledged by
// one replica.
func waitAcked(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := acked(addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no replica acknowledged a write within %v: %w", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// acked writes a scratch key on addr and reports whether a replica
// acknowledged it within 200ms.
func acked(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINCR\r\n$29\r\ndlm-conformance:replica-check\r\n*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$3\r\n200\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	var lines [2]string
	for i := range lines {
		if lines[i], err = r.ReadString('\n'); err != nil {
			return err
		}
		lines[i] = strings.TrimRight(lines[i], "\r\n")
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(lines[1], ":")); err != nil || n < 1 {
		return fmt.Errorf("INCR, WAIT 1 200: replies %q", lines)
	}
	return nil
}
