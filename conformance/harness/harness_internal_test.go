package harness

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A server that crashes is reported as crashed, with its crash report
// (the rule running and every later one say so); before that, not; and a
// stall of a crashed server fails.
func TestCrashedReportsTheCrash(t *testing.T) {
	t.Parallel() // its server is its own; the crash report takes seconds
	srv := startServer(t, config{})
	tr := newFaultPoint(t, srv, config{})
	if err := tr.Crashed(); err != nil {
		t.Fatalf("a running server reported as crashed: %v", err)
	}
	if err := srv.Signal(syscall.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); err == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		err = tr.Crashed()
	}
	if err == nil || !strings.Contains(err.Error(), "crashed by signal") {
		t.Fatalf("after SIGSEGV: Crashed() = %v, want the crash report", err)
	}
	t.Log(err)
	if err := tr.Stall(time.Millisecond); err == nil {
		t.Error("stalling a server that crashed succeeded")
	}
}

// The server and the fault point listen on the ports of the range given.
func TestPortsRange(t *testing.T) {
	// A range of ports that are free now (taken from the kernel's free
	// ports: two runs of this test may run side by side).
	srv := startServer(t, config{})
	base := srv.Port
	srv.Stop()
	cfg := config{first: base, last: base + 3}
	s2 := startServer(t, cfg)
	tr := newFaultPoint(t, s2, cfg)
	for _, addr := range []string{s2.Addr, tr.Addr} {
		port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
		if port < cfg.first || port > cfg.last {
			t.Errorf("listening on %s, outside the ports %d-%d", addr, cfg.first, cfg.last)
		}
	}
	if s2.Addr == tr.Addr {
		t.Errorf("the server and the fault point share %s", tr.Addr)
	}
}

func TestPortsEnv(t *testing.T) {
	t.Setenv(PortsEnv, "7100-7199")
	if c := newConfig(t, nil); c.first != 7100 || c.last != 7199 {
		t.Errorf("%s=7100-7199: ports %d-%d", PortsEnv, c.first, c.last)
	}
	if c := newConfig(t, []Option{Ports(8000, 8001)}); c.first != 8000 || c.last != 8001 {
		t.Errorf("the Ports option after %s: ports %d-%d, want 8000-8001", PortsEnv, c.first, c.last)
	}
}
