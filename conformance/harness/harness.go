// Package harness runs the conformance suite on a driver against a
// redis-server it starts and owns, so a driver's tests need no server of
// their own and never touch a shared one:
//
//	func TestConformance(t *testing.T) {
//		harness.Run(t, func(t *testing.T, addr string) dlm.Node {
//			return mydriver.New(addr) // a new client, closed with t.Cleanup
//		})
//	}
//
// Run starts redis-server (found on PATH) on a free loopback port, puts a
// fault proxy in front of it, and runs conformance.RunNode with nodes dial
// returns for the proxy's address. Owning the path to the server lets the
// suite check what no wrapper of a Node can reach: that a driver never
// retries a script (a reply cut or held on the wire) and that its dial
// honours the context (connects that hang). The server dies with the test
// process however it ends (a parent-death signal, and t.Cleanup).
//
// When redis-server is not on PATH the test is skipped, saying so, unless
// DLM_REQUIRE_REDIS=1 is set: then it fails.
//
// The fault proxy is toxiproxy's (github.com/Shopify/toxiproxy/v2), run in
// process: it is widely used for exactly this and its latency and
// connection-cutting toxics apply to open connections too. It brings its own
// dependencies (prometheus, gorilla/mux, zerolog), which is why it lives in
// this package and not in package conformance, which imports only the
// standard library and dlm. Connects that hang are the one fault toxiproxy
// cannot make; Run makes them with a listening socket whose accept queue is
// full, so the kernel drops the SYNs (no privileges needed).
package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// RequireEnv names the environment variable that, set to 1, turns a missing
// redis-server from a skip into a failure.
const RequireEnv = "DLM_REQUIRE_REDIS"

// Run checks the driver behind dial with every rule of conformance.RunNode,
// those that need the suite to own the server included; the server has a
// replica of its own (the suite freezes it to check RunWait). dial returns a new
// Node over a new client of addr (host:port); it is called once for a node
// shared by all rules and once per rule, and should close its client with
// t.Cleanup.
func Run(t *testing.T, dial func(t *testing.T, addr string) dlm.Node) {
	t.Helper()
	srv := startServer(t)
	tr := newFaultPoint(t, srv)
	tr.FreezeReplica = startReplica(t, srv)
	transport.Register(t, tr)
	conformance.RunNode(t, func(t *testing.T) dlm.Node { return dial(t, tr.Addr) })
}

// StartServer starts a throwaway redis-server on a free loopback port, with
// persistence off, and returns its address; it is killed when t ends, or
// when the test process dies. Use it for conformance.RunStrategy's
// Topology (Nodes and Servers).
func StartServer(t testing.TB) string {
	t.Helper()
	return startServer(t).addr
}

// A server is a redis-server process the harness started.
type server struct {
	addr string
	proc *os.Process
}

// stall stops the server's process (SIGSTOP) for d: it answers nobody, its
// connections stay open, and it burns no CPU meanwhile.
func (s *server) stall(d time.Duration) error {
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return s.proc.Signal(syscall.SIGCONT)
}

func startServer(t testing.TB) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := fmt.Sprintf("conformance/harness: redis-server not found on PATH: %v", err)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		srv, err := launch(t, bin, dir)
		if err == nil {
			return srv
		}
		if attempt == 5 {
			t.Fatalf("conformance/harness: %v", err)
		}
	}
}

func launch(t testing.TB, bin, dir string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--logfile", "redis.log", "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Dir = dir
	// The server dies with the test process however it ends (a watchdog's
	// panic, SIGKILL), not only through t.Cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() { _ = cmd.Process.Kill(); <-exited }
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, lastLines(string(log)))
		default:
		}
		if reply, err := transport.Do(addr, time.Second, "PING"); err == nil && reply == "PONG" {
			t.Cleanup(stop)
			return &server{addr: addr, proc: cmd.Process}, nil
		}
	}
	stop()
	return nil, fmt.Errorf("redis-server on port %d not answering after 10s", port)
}

func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// A faultPoint is a toxiproxy proxy in front of the server, and the
// listening socket that makes connects hang while it is down.
type faultPoint struct {
	proxy *toxiproxy.Proxy

	mu   sync.Mutex
	hang *hangingListener // while connects hang
}

func newFaultPoint(t *testing.T, srv *server) *transport.Transport {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "dlm-conformance", "127.0.0.1:0", srv.addr)
	if err := p.Start(); err != nil {
		t.Fatalf("conformance/harness: starting the fault proxy: %v", err)
	}
	f := &faultPoint{proxy: p}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.hang != nil {
			f.hang.close()
			f.hang = nil
		}
		p.Stop()
	})
	return &transport.Transport{
		Addr:         p.Listen,
		Stall:        srv.stall,
		CutReplies:   f.cutReplies,
		DelayReplies: f.delayReplies,
		Hang:         f.setHang,
	}
}

// toxic adds (or, with attrs nil, removes) the named toxic on the replies'
// direction.
func (f *faultPoint) toxic(name, kind, attrs string) error {
	if attrs == "" {
		err := f.proxy.Toxics.RemoveToxic(context.Background(), name)
		if err != nil && !strings.Contains(err.Error(), "not found") {
			return err
		}
		return nil
	}
	_, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":%q,"type":%q,"stream":"downstream","toxicity":1,"attributes":%s}`, name, kind, attrs)))
	return err
}

func (f *faultPoint) cutReplies(on bool) error {
	if !on {
		return f.toxic("cut", "", "")
	}
	// Not one byte of a reply passes: the connection closes when the first
	// arrives, after the server ran the command.
	return f.toxic("cut", "limit_data", `{"bytes":0}`)
}

func (f *faultPoint) delayReplies(d time.Duration) error {
	if err := f.toxic("delay", "", ""); err != nil || d <= 0 {
		return err
	}
	return f.toxic("delay", "latency", fmt.Sprintf(`{"latency":%d}`, d.Milliseconds()))
}

// setHang stops the proxy, closing every connection through it, and binds
// its port with a socket whose accept queue is full; off reverses it.
func (f *faultPoint) setHang(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on == (f.hang != nil) {
		return nil
	}
	if !on {
		f.hang.close()
		f.hang = nil
		var err error
		for range 50 { // the port may be busy for a moment
			if err = f.proxy.Start(); err == nil {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("restarting the fault proxy on %s: %w", f.proxy.Listen, err)
	}
	f.proxy.Stop()
	h, err := listenHanging(f.proxy.Listen)
	if err != nil {
		_ = f.proxy.Start()
		return err
	}
	f.hang = h
	return nil
}

// A hangingListener listens on an address without ever accepting, its
// accept queue filled, so the kernel drops further SYNs and a connect waits
// until its own timeout.
type hangingListener struct {
	fd    int
	conns []net.Conn // what fills the queue
}

func listenHanging(addr string) (*hangingListener, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	ip := net.ParseIP(host).To4()
	if err != nil || ip == nil {
		return nil, fmt.Errorf("hanging listener: want an IPv4 host:port, got %q", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	h := &hangingListener{fd: fd}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	sa := &syscall.SockaddrInet4{Port: port}
	copy(sa.Addr[:], ip)
	for range 50 { // the proxy's port may linger for a moment
		if err = syscall.Bind(fd, sa); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		err = syscall.Listen(fd, 0) // a backlog of 0 queues one connection
	}
	if err != nil {
		h.close()
		return nil, fmt.Errorf("hanging listener on %s: %w", addr, err)
	}
	// Fill the queue until a connect times out: then connects hang.
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return h, nil
		}
		h.conns = append(h.conns, c)
	}
	h.close()
	return nil, fmt.Errorf("hanging listener on %s: connects still complete with the accept queue full; this kernel answers them", addr)
}

func (h *hangingListener) close() {
	for _, c := range h.conns {
		_ = c.Close()
	}
	_ = syscall.Close(h.fd)
}
