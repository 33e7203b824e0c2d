// Package harness runs the conformance suite on a driver against a
// redis-server it starts and owns, so a driver's tests need no server of
// their own and never touch a shared one:
//
//	func TestConformance(t *testing.T) {
//		harness.Run(t, func(t *testing.T, addr string) driver.Node {
//			return mydriver.New(addr) // a new client, closed with t.Cleanup
//		})
//	}
//
// Run starts redis-server (found on PATH, or the program of the Server
// option: valkey-server, another release of Redis) on a free loopback
// port, puts a fault proxy in front of it, and runs conformance.RunNode
// with nodes dial returns for the proxy's address. Owning the path to the server lets the
// suite check what no wrapper of a Node can reach: that a driver never
// retries a script (a reply cut or held on the wire) and that its dial
// honours the context (connects that hang). For the PermanentErrors rule it
// also starts, for that rule only, servers that refuse scripts (EVAL
// renamed away, a password, an ACL, a busy script) and a Sentinel, and
// dials them with the driver. Where its server lacks WAITAOF (before Redis 7.2),
// it starts for the RunWaitAOF rule a Valkey 8.0 (valkey-server on PATH,
// when installed) with its append-only file on, and dials it with the
// driver. The servers die with the test process
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
// The fault proxy and the servers are those of dlm's own tests
// (internal/redistest), run in process: a proxy that drops, delays or cuts
// replies on open connections too, and makes connects hang with a listening
// socket whose accept queue is full, so the kernel drops the SYNs (no
// privileges needed).
package harness

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/internal/transport"
	"github.com/dlmgo/dlm/internal/redistest"
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
	dial        func(t *testing.T, addr string) (driver.Node, error)
	sentinel    func(t *testing.T, addrs []string, master string) (driver.Node, error)
	tls         func(t *testing.T, addr string, cfg *tls.Config) (driver.Node, error)
	bin         string   // the server program; "": redis-server on PATH
	env         []string // added to its environment
}

// Ports makes the harness listen only on loopback ports first to last
// (the server and the fault point take one each, the first free ones).
func Ports(first, last int) Option {
	return func(c *config) { c.first, c.last = first, last }
}

// Server makes the harness run bin for every server it starts, instead
// of redis-server found on PATH: a program that takes redis-server's
// arguments, such as valkey-server or another release of Redis (6.0 or
// later), with env added to its environment (for example
// "LD_LIBRARY_PATH=/opt/redis-6.0/lib").
func Server(bin string, env ...string) Option {
	return func(c *config) { c.bin, c.env = bin, env }
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
func Run(t *testing.T, dial func(t *testing.T, addr string) driver.Node, opts ...Option) {
	t.Helper()
	tr := own(t, dial, newConfig(t, opts))
	conformance.RunNode(t, func(t *testing.T) driver.Node { return dial(t, tr.Addr) })
}

// Own starts a server and a fault point in front of it for the rules of
// conformance.RunNode that need the suite to own them (NoRetry,
// DialDeadline, PermanentErrors, RunWaitFrozenReplica, WatchResubscribes,
// WatchDialDeadline, TLS): the next RunNode(t, …) with the same t runs those rules on
// nodes dial returns for the fault point's address, and every other rule on
// its own nodes (of a Cluster, a Sentinel deployment, a server of the
// caller's):
//
//	harness.Own(t, func(t *testing.T, addr string) driver.Node { return mydriver.New(addr) })
//	conformance.RunNode(t, func(t *testing.T) driver.Node { return mydriver.NewCluster(addrs) })
func Own(t *testing.T, dial func(t *testing.T, addr string) driver.Node, opts ...Option) {
	t.Helper()
	tr := own(t, dial, newConfig(t, opts))
	tr.NewNode = func(t *testing.T) driver.Node { return dial(t, tr.Addr) }
}

func own(t *testing.T, dial func(t *testing.T, addr string) driver.Node, cfg config) *transport.Transport {
	t.Helper()
	srv := startServer(t, cfg)
	tr := newFaultPoint(t, srv, cfg)
	tr.Dial, tr.DialSentinel, tr.DialTLS = cfg.dial, cfg.sentinel, cfg.tls
	tr.TLSServer = startTLSServer
	if tr.Dial == nil {
		tr.Dial = func(t *testing.T, addr string) (driver.Node, error) { return dial(t, addr), nil }
	}
	tr.Refusers = func(t testing.TB) (*transport.Refusers, error) { return startRefusers(t, srv, cfg) }
	tr.FreezeReplica = startReplica(t, srv, cfg)
	tr.WaitAOFServer = func(t testing.TB) (string, string) { return startWaitAOFServer(t, cfg) }
	transport.Register(t, tr)
	return tr
}

// WithDial gives Run a dial that may fail, for a driver whose client
// connects when it is made (rueidis): the PermanentErrors rule then uses it
// instead of Run's dial on the servers it starts, and takes a dial's error
// for the error of every call. It should close its client with t.Cleanup.
func WithDial(dial func(t *testing.T, addr string) (driver.Node, error)) Option {
	return func(c *config) { c.dial = dial }
}

// WithTLS gives Run the driver's way to a server over TLS: dial returns a
// Node over a new client of addr that speaks TLS with cfg (its root CAs,
// its client certificate), or the error its dial met; it should close its
// client with t.Cleanup. Run then checks, in the TLS rule, on a server it
// starts that speaks TLS only: that a client trusting a CA that did not
// sign the server's certificate fails (dial or first call) with an error
// dlm.Permanent reports true, and that one trusting the right CA works.
// Without it the TLS rule skips, saying so.
func WithTLS(dial func(t *testing.T, addr string, cfg *tls.Config) (driver.Node, error)) Option {
	return func(c *config) { c.tls = dial }
}

// startTLSServer starts a redis-server that speaks TLS only, with the
// certificates of a new CA, and returns its address, a client
// configuration that trusts that CA, and one that trusts another CA (both
// with a client certificate the server accepts).
func startTLSServer(t testing.TB) (addr string, right, wrong *tls.Config) {
	certs := redistest.NewCerts(t)
	other := redistest.NewCerts(t)
	srv := redistest.StartTLS(t, certs)
	right = certs.ClientConfig()
	wrong = other.ClientConfig()
	wrong.Certificates = right.Certificates // only the server's certificate fails
	return srv.Addr, right, wrong
}

// WithSentinel gives Run the driver's way to a primary through Sentinel:
// dial returns a Node for the primary that the Sentinels at addrs know as
// master, or the error that its dial met (it should close its client with
// t.Cleanup). Run then checks, in the PermanentErrors rule, that a master
// name no Sentinel knows fails at once with an error that names it and
// matches driver.ErrUnknownMaster (in the dial or in the node's first call),
// and that a known one leads to the suite's server.
func WithSentinel(dial func(t *testing.T, addrs []string, master string) (driver.Node, error)) Option {
	return func(c *config) { c.sentinel = dial }
}

// startRefusers starts the servers of transport.Refusers, stopped when t
// ends; the Sentinel monitors srv.
func startRefusers(t testing.TB, srv *redistest.Server, cfg config) (*transport.Refusers, error) {
	start := func(conf string, args ...string) (string, error) {
		s, err := redistest.Launch(redistest.Config{Bin: cfg.program(t), Env: cfg.env, Dir: t.TempDir(), Ports: cfg.ports(), Conf: conf, Args: args})
		if err != nil {
			return "", err
		}
		t.Cleanup(s.Stop)
		return s.Addr, nil
	}
	do := func(addr string, args ...string) error {
		_, err := transport.Do(addr, 5*time.Second, args...)
		return err
	}
	r := &transport.Refusers{Master: "dlm-conformance"}
	port := srv.Port
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
				// EVAL_RO and EVALSHA_RO begin with Redis 7.0.
				if err = do(r.NoPerm, "ACL", "SETUSER", "default", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro"); err != nil {
					err = do(r.NoPerm, "ACL", "SETUSER", "default", "-eval", "-evalsha")
				}
			}
			return err
		},
		func() (err error) {
			if r.Busy, err = start(""); err == nil {
				// busy-reply-threshold, as Redis 7.0 calls it too.
				err = do(r.Busy, "CONFIG", "SET", "lua-time-limit", "100")
			}
			return err
		},
		func() (err error) {
			r.Sentinel, err = start(fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", r.Master, port), "--sentinel")
			return err
		},
		func() error {
			r.Refused = redistest.RefusedAddr(t)
			return nil
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("conformance/harness: starting the servers that refuse scripts: %w", err)
		}
	}
	return r, nil
}

// startWaitAOFServer starts, for RunWaitAOF, a server of the matrix that
// answers WAITAOF (redistest.Valkey80: Valkey 8.0), with its append-only
// file on, on one of cfg's ports; it returns "" and why when none is
// installed or it did not start.
func startWaitAOFServer(t testing.TB, cfg config) (addr, why string) {
	b, err := redistest.LookupBuild(redistest.Valkey80)
	if err != nil {
		return "", err.Error()
	}
	s, err := redistest.Launch(redistest.Config{Bin: b.Bin, Env: b.Env, Dir: t.TempDir(), Ports: cfg.ports(), Args: []string{"--appendonly", "yes"}})
	if err != nil {
		return "", fmt.Sprintf("starting %s: %v", b.Bin, err)
	}
	t.Cleanup(s.Stop)
	return s.Addr, ""
}

// StartServer starts a throwaway redis-server on a free loopback port (one
// of the Ports given, or of DLM_CONFORMANCE_PORTS), with persistence off,
// and returns its address; it is killed when t ends, or when the test
// process dies. Use it for conformance.RunStrategy's Topology (Nodes and
// Servers).
func StartServer(t testing.TB, opts ...Option) string {
	t.Helper()
	return startServer(t, newConfig(t, opts)).Addr
}

// program returns the server program: the Server option's, or
// redis-server on PATH (skipping or failing t when it is missing).
func (c config) program(t testing.TB) string {
	t.Helper()
	if c.bin != "" {
		return c.bin
	}
	return redistest.Binary(t, "redis-server")
}

// stall stops the server's process (SIGSTOP) for d: it answers nobody, its
// connections stay open, and it burns no CPU meanwhile.
func stall(s *redistest.Server, d time.Duration) error {
	if err := s.Exited(); err != nil {
		return err
	}
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return s.Signal(syscall.SIGCONT)
}

// startServer starts a redis-server on one of cfg's ports, killed when t
// ends or when the test process dies.
func startServer(t testing.TB, cfg config) *redistest.Server {
	t.Helper()
	srv, err := redistest.Launch(redistest.Config{Bin: cfg.program(t), Env: cfg.env, Dir: t.TempDir(), Ports: cfg.ports()})
	if err != nil {
		t.Fatalf("conformance/harness: no %s started: %v", filepath.Base(cfg.program(t)), err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func newFaultPoint(t *testing.T, srv *redistest.Server, cfg config) *transport.Transport {
	t.Helper()
	var p *redistest.Proxy
	var errs []error
	for _, port := range cfg.ports() {
		if port != 0 && port == srv.Port {
			continue
		}
		var err error
		if p, err = redistest.NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), srv.Addr); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if p == nil {
		t.Fatalf("conformance/harness: starting the fault proxy: %v", errors.Join(errs...))
	}
	t.Cleanup(p.Close)
	return &transport.Transport{
		Addr:  p.Addr,
		Stall: func(d time.Duration) error { return stall(srv, d) },
		CutReplies: func(on bool) error {
			p.CutReplies(on)
			return nil
		},
		DelayReplies: func(d time.Duration) error {
			p.SetDelay(d)
			return nil
		},
		Hang:    p.Hang,
		Crashed: srv.Exited,
	}
}
