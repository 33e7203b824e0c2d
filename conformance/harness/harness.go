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
// honours the context (connects that hang). For the PermanentErrors rule it
// also starts, for that rule only, servers that refuse scripts (EVAL
// renamed away, a password, an ACL, a busy script) and a Sentinel, and
// dials them with the driver. The servers die with the test process
// however it ends (a parent-death signal, and t.Cleanup).
//
// A driver whose other rules run against a deployment of the author's own
// (a Cluster, Sentinel) calls Own before conformance.RunNode: the rules
// that need the suite to own the server then run on a server Own starts,
// the others on RunNode's nodes. The server and the fault point listen on
// free loopback ports, or on the ports of the Ports option or of
// DLM_CONFORMANCE_PORTS ("7100-7199") where only some may be used.
//
// When the server exits while the suite runs (it crashed), the rule running
// says so with the tail of the server's log (a crash report among it), and
// every later rule fails at once saying the same, rather than fail on what
// followed.
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
	"errors"
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

// PortsEnv names the environment variable that gives the loopback ports
// the harness may listen on, as "first-last" (for example 7100-7199), when
// no Ports option does: for a machine or container where only some ports
// may be used. Without either, the ports are free ones the kernel picks.
const PortsEnv = "DLM_CONFORMANCE_PORTS"

// An Option changes how the harness starts its server and fault point.
type Option func(*config)

type config struct {
	first, last int // ports to use; 0: any free port
	dial        func(t *testing.T, addr string) (dlm.Node, error)
	sentinel    func(t *testing.T, addrs []string, master string) (dlm.Node, error)
}

// Ports makes the harness listen only on loopback ports first to last
// (the server and the fault point take one each, the first free ones).
func Ports(first, last int) Option {
	return func(c *config) { c.first, c.last = first, last }
}

func newConfig(t testing.TB, opts []Option) config {
	t.Helper()
	var c config
	if v := os.Getenv(PortsEnv); v != "" {
		a, b, ok := strings.Cut(v, "-")
		first, err1 := strconv.Atoi(a)
		last, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || first <= 0 || last < first || last > 65535 {
			t.Fatalf("conformance/harness: %s=%q: want first-last, two ports", PortsEnv, v)
		}
		c.first, c.last = first, last
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// ports returns the ports to try, in order.
func (c config) ports() []int {
	if c.first == 0 {
		return []int{0, 0, 0, 0, 0}
	}
	var ps []int
	for p := c.first; p <= c.last; p++ {
		ps = append(ps, p)
	}
	return ps
}

// Run checks the driver behind dial with every rule of conformance.RunNode,
// those that need the suite to own the server included; the server has a
// replica of its own (the suite freezes it to check RunWait). dial returns a new
// Node over a new client of addr (host:port); it is called once for a node
// shared by all rules, once per rule, and for other servers the suite
// starts (which refuse scripts, for the PermanentErrors rule), and should
// close its client with t.Cleanup.
func Run(t *testing.T, dial func(t *testing.T, addr string) dlm.Node, opts ...Option) {
	t.Helper()
	tr := own(t, dial, newConfig(t, opts))
	conformance.RunNode(t, func(t *testing.T) dlm.Node { return dial(t, tr.Addr) })
}

// Own starts a server and a fault point in front of it for the rules of
// conformance.RunNode that need the suite to own them (NoRetry,
// DialDeadline): the next RunNode(t, …) with the same t runs those rules on
// nodes dial returns for the fault point's address, and every other rule on
// its own nodes (of a Cluster, a Sentinel deployment, a server of the
// caller's):
//
//	harness.Own(t, func(t *testing.T, addr string) dlm.Node { return mydriver.New(addr) })
//	conformance.RunNode(t, func(t *testing.T) dlm.Node { return mydriver.NewCluster(addrs) })
func Own(t *testing.T, dial func(t *testing.T, addr string) dlm.Node, opts ...Option) {
	t.Helper()
	tr := own(t, dial, newConfig(t, opts))
	tr.NewNode = func(t *testing.T) dlm.Node { return dial(t, tr.Addr) }
}

func own(t *testing.T, dial func(t *testing.T, addr string) dlm.Node, cfg config) *transport.Transport {
	t.Helper()
	srv := startServer(t, cfg)
	tr := newFaultPoint(t, srv, cfg)
	tr.Dial, tr.DialSentinel = cfg.dial, cfg.sentinel
	if tr.Dial == nil {
		tr.Dial = func(t *testing.T, addr string) (dlm.Node, error) { return dial(t, addr), nil }
	}
	tr.Refusers = func(t testing.TB) (*transport.Refusers, error) { return startRefusers(t, srv, cfg) }
	tr.FreezeReplica = startReplica(t, srv, cfg)
	transport.Register(t, tr)
	return tr
}

// WithDial gives Run a dial that may fail, for a driver whose client
// connects when it is made (rueidis): the PermanentErrors rule then uses it
// instead of Run's dial on the servers it starts, and takes a dial's error
// for the error of every call. It should close its client with t.Cleanup.
func WithDial(dial func(t *testing.T, addr string) (dlm.Node, error)) Option {
	return func(c *config) { c.dial = dial }
}

// WithSentinel gives Run the driver's way to a primary through Sentinel:
// dial returns a Node for the primary that the Sentinels at addrs know as
// master, or the error that its dial met (it should close its client with
// t.Cleanup). Run then checks, in the PermanentErrors rule, that a master
// name no Sentinel knows fails at once with an error that names it and
// matches dlm.ErrUnknownMaster (in the dial or in the node's first call),
// and that a known one leads to the suite's server.
func WithSentinel(dial func(t *testing.T, addrs []string, master string) (dlm.Node, error)) Option {
	return func(c *config) { c.sentinel = dial }
}

// startRefusers starts the servers of transport.Refusers, stopped when t
// ends; the Sentinel monitors srv.
func startRefusers(t testing.TB, srv *server, cfg config) (*transport.Refusers, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	start := func(conf string, args ...string) (string, error) {
		var errs []error
		for _, port := range cfg.ports() {
			s, err := launch(t, bin, t.TempDir(), port, conf, args...)
			if err == nil {
				return s.addr, nil
			}
			errs = append(errs, err)
		}
		return "", errors.Join(errs...)
	}
	do := func(addr string, args ...string) error {
		_, err := transport.Do(addr, 5*time.Second, args...)
		return err
	}
	r := &transport.Refusers{Master: "dlm-conformance"}
	_, port, _ := net.SplitHostPort(srv.addr)
	steps := []func() error{
		func() (err error) {
			r.NoScripting, err = start("", "--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "")
			return err
		},
		func() (err error) {
			if r.NeedsAuth, err = start(""); err == nil {
				err = do(r.NeedsAuth, "CONFIG", "SET", "requirepass", "dlm-conformance-secret")
			}
			return err
		},
		func() (err error) {
			if r.NoPerm, err = start(""); err == nil {
				err = do(r.NoPerm, "ACL", "SETUSER", "default", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro")
			}
			return err
		},
		func() (err error) {
			if r.Busy, err = start(""); err == nil {
				err = do(r.Busy, "CONFIG", "SET", "busy-reply-threshold", "100")
			}
			return err
		},
		func() (err error) {
			r.Sentinel, err = start(fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s 1\n", r.Master, port), "--sentinel")
			return err
		},
		func() error {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				r.Refused = l.Addr().String()
				err = l.Close()
			}
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("conformance/harness: starting the servers that refuse scripts: %w", err)
		}
	}
	return r, nil
}

// StartServer starts a throwaway redis-server on a free loopback port (one
// of the Ports given, or of DLM_CONFORMANCE_PORTS), with persistence off,
// and returns its address; it is killed when t ends, or when the test
// process dies. Use it for conformance.RunStrategy's Topology (Nodes and
// Servers).
func StartServer(t testing.TB, opts ...Option) string {
	t.Helper()
	return startServer(t, newConfig(t, opts)).addr
}

// A server is a redis-server process the harness started.
type server struct {
	addr   string
	dir    string
	proc   *os.Process
	exited chan struct{} // closed once the process has exited
	state  *os.ProcessState
}

// crashed returns nil while the server runs, and after it exited an error
// saying how, with its crash report or the tail of its log. The report is
// the evidence: redis-server installs its crash handler with SA_RESETHAND,
// so a kernel log line "segfault … in libgcc_s" most likely shows a second
// fault, in the handler unwinding the stack for that report, and says
// nothing of the first (the log itself goes with t's temporary directory).
func (s *server) crashed() error {
	select {
	case <-s.exited:
	default:
		return nil
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	text := string(log)
	if i := strings.Index(text, "=== REDIS BUG REPORT START"); i >= 0 {
		head, _, _ := strings.Cut(text[i:], "------ INFO OUTPUT")
		return fmt.Errorf("redis-server %s (pid %d) exited (%v); its crash report:\n%s", s.addr, s.proc.Pid, s.state, firstLines(head, 30))
	}
	return fmt.Errorf("redis-server %s (pid %d) exited (%v); the tail of its log:\n%s", s.addr, s.proc.Pid, s.state, lastLines(text, 20))
}

// stall stops the server's process (SIGSTOP) for d: it answers nobody, its
// connections stay open, and it burns no CPU meanwhile.
func (s *server) stall(d time.Duration) error {
	if err := s.crashed(); err != nil {
		return err
	}
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return s.proc.Signal(syscall.SIGCONT)
}

func startServer(t testing.TB, cfg config) *server {
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
	var errs []error
	for _, port := range cfg.ports() {
		srv, err := launch(t, bin, dir, port, "")
		if err == nil {
			return srv
		}
		errs = append(errs, err)
	}
	t.Fatalf("conformance/harness: no redis-server started: %v", errors.Join(errs...))
	return nil
}

// launch starts bin in dir on port (a free port when port is 0), with the
// config file conf first when conf is not empty, and args last.
func launch(t testing.TB, bin, dir string, port int, conf string, args ...string) (*server, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var argv []string
	if conf != "" { // Sentinel rewrites it: a file of its own
		f := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		argv = append(argv, f)
	}
	argv = append(argv, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--logfile", "redis.log", "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd := exec.Command(bin, append(argv, args...)...)
	cmd.Dir = dir
	// The server dies with the test process however it ends (a watchdog's
	// panic, SIGKILL), not only through t.Cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	srv := &server{addr: addr, dir: dir, proc: cmd.Process, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); srv.state = cmd.ProcessState; close(srv.exited) }()
	stop := func() { _ = cmd.Process.Kill(); <-srv.exited }
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := srv.crashed(); err != nil {
			return nil, err
		}
		if reply, err := transport.Do(addr, time.Second, "PING"); err == nil && reply == "PONG" {
			t.Cleanup(stop)
			return srv, nil
		}
	}
	stop()
	return nil, fmt.Errorf("redis-server on port %d not answering after 10s", port)
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// A faultPoint is a toxiproxy proxy in front of the server, and the
// listening socket that makes connects hang while it is down.
type faultPoint struct {
	proxy *toxiproxy.Proxy

	mu   sync.Mutex
	hang *hangingListener // while connects hang
}

func newFaultPoint(t *testing.T, srv *server, cfg config) *transport.Transport {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var p *toxiproxy.Proxy
	var errs []error
	for _, port := range cfg.ports() {
		listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if listen == srv.addr {
			continue
		}
		p = toxiproxy.NewProxy(api, "dlm-conformance", listen, srv.addr)
		err := p.Start()
		if err == nil {
			break
		}
		errs, p = append(errs, err), nil
	}
	if p == nil {
		t.Fatalf("conformance/harness: starting the fault proxy: %v", errors.Join(errs...))
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
		Crashed:      srv.crashed,
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
