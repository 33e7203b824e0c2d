// Package redistest starts real redis-server processes on loopback ports for
// tests, and freezes, kills and restarts them to inject faults.
//
// When redis-server is not on PATH, tests that need it are skipped with a
// message, unless DLM_REQUIRE_REDIS=1 is set (as CI does): then they fail.
package redistest

import (
	"bufio"
	"crypto/tls"
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
)

// RequireEnv is the environment variable that turns a missing server from a
// skip into a failure.
const RequireEnv = "DLM_REQUIRE_REDIS"

// Binary returns the path of the named program (redis-server,
// redis-sentinel), skipping or failing t when it is missing.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found on PATH (install it, e.g. apt-get install redis-server redis-sentinel): %v", name, err)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
	}
	t.Skip(msg)
	return ""
}

// A Server is a redis-server (or redis-sentinel) process owned by a test or
// a tool.
type Server struct {
	Addr string // host:port, 127.0.0.1 unless Config.Host says otherwise
	Port int

	bin     string
	dir     string
	host    string
	args    []string // after the port and defaults; a config file comes first
	conf    string   // config file written before the first start, if any
	certs   *Certs   // the certificates of a server that speaks TLS only; nil for plain
	command func(name string, args ...string) *exec.Cmd
	ready   time.Duration
	env     []string // added to the process's environment (a Clock's shim)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	frozen bool
}

// Config says how Launch starts a server. Zero fields take the defaults
// noted.
type Config struct {
	Bin  string // the program; default redis-server, found on PATH
	Dir  string // its working directory (redis.log, data, a config file); required
	Host string // the address it binds and is reached at; default 127.0.0.1
	// Ports are the ports to try, in order, until one starts; default five
	// free ports the kernel picks.
	Ports []int
	// Conf, when not empty, is written to sentinel.conf in Dir and given as
	// the config file (first argument; Sentinel rewrites it).
	Conf string
	Args []string // after the defaults (persistence off, the port, Dir)
	// Command makes the process (to run it in a network namespace, or
	// under valgrind); default exec.Command. Its result gets a
	// parent-death signal (SIGKILL) added.
	Command func(name string, args ...string) *exec.Cmd
	// Ready is how long a start may take until the server answers PING;
	// default 10s.
	Ready time.Duration
	// Clock, when set, is the server's wall clock (NewClock), in every
	// start and restart.
	Clock *Clock
	// Env is added to the program's environment (a Build's Env).
	Env []string
}

// Launch starts a server as c says, with persistence off, and returns it
// once it answers PING. The caller stops it (Stop); it also dies with this
// process (a parent-death signal). It needs no testing.TB: bench and the
// fault suite start their servers with it.
func Launch(c Config) (*Server, error) {
	s := &Server{bin: c.Bin, dir: c.Dir, host: c.Host, args: c.Args, conf: c.Conf, command: c.Command, ready: c.Ready}
	s.env = append(s.env, c.Env...)
	if c.Clock != nil {
		s.env = append(s.env, c.Clock.env...)
	}
	if s.bin == "" {
		p, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, err
		}
		s.bin = p
	}
	return s, s.launch(c.Ports)
}

// Start starts a redis-server on a free loopback port with persistence off,
// replicas synchronised without the default 5s delay,
// and the given extra arguments (for example "--appendonly", "yes"), and
// stops it when the test ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	// A replica's first sync starts at once, not after the default 5s.
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	return launch(t, &Server{bin: Binary(t, "redis-server"), dir: t.TempDir(), args: args})
}

func launch(t testing.TB, s *Server) *Server {
	t.Helper()
	if err := s.launch(nil); err != nil {
		t.Fatalf("redistest: start %s: %v", filepath.Base(s.bin), err)
	}
	t.Cleanup(s.Stop)
	return s
}

// launch starts s on the first of ports that works (free ports when none).
func (s *Server) launch(ports []int) error {
	if s.host == "" {
		s.host = "127.0.0.1"
	}
	if len(ports) == 0 {
		ports = make([]int, 5)
	}
	var errs []error
	for _, port := range ports {
		if port == 0 {
			var err error
			if port, err = freePort(s.host); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		s.Port = port
		s.Addr = net.JoinHostPort(s.host, strconv.Itoa(s.Port))
		err := s.start()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StartN starts n servers.
func StartN(t testing.TB, n int, args ...string) []*Server {
	t.Helper()
	s := make([]*Server, n)
	for i := range s {
		s[i] = Start(t, args...)
	}
	return s
}

func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		// Sentinel rewrites its config file, so it must be a file of its own.
		f := filepath.Join(s.dir, "sentinel.conf")
		if _, err := os.Stat(f); err != nil {
			if err := os.WriteFile(f, []byte(s.conf), 0o600); err != nil {
				return err
			}
		}
		args = append(args, f)
	}
	if s.certs != nil {
		args = append(args, s.certs.serverArgs(strconv.Itoa(s.Port))...)
	} else {
		args = append(args, "--port", strconv.Itoa(s.Port))
	}
	args = append(args, "--bind", s.host,
		"--dir", s.dir, "--logfile", "redis.log",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	if s.host != "127.0.0.1" {
		args = append(args, "--protected-mode", "no")
	}
	args = append(args, s.args...)
	command := s.command
	if command == nil {
		command = exec.Command
	}
	cmd := command(s.bin, args...)
	cmd.Dir = s.dir
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// The server dies with the test process however it ends (a watchdog's
	// exit, a panic, SIGKILL), not only through the test's Cleanup.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.frozen = cmd, exited, false
	s.mu.Unlock()
	ready := s.ready
	if ready == 0 {
		ready = 10 * time.Second
	}
	deadline := time.Now().Add(ready)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.mu.Lock()
			s.cmd = nil
			s.mu.Unlock()
			return fmt.Errorf("%s on port %d exited: %s", filepath.Base(s.bin), s.Port, s.LogTail())
		default:
		}
		// The answer must come from this process: when another holds the
		// port, it answers while this one fails to bind and exits.
		if pingTLS(s.Addr, s.TLS()) == nil && listens(cmd.Process.Pid, s.Port) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("%s on port %d not ready after %v: %s", filepath.Base(s.bin), s.Port, ready, s.LogTail())
}

// ping sends PING and expects +PONG, or NOAUTH from a server that requires
// a password (it is up).
func ping(addr string) error { return pingTLS(addr, nil) }

// pingTLS is ping over TLS with cfg, or plain when cfg is nil.
func pingTLS(addr string, cfg *tls.Config) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if cfg != nil {
		cfg.ServerName = "127.0.0.1"
		c = tls.Client(c, cfg)
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	return nil
}

// LogTail returns the last 2000 bytes of the server's log, for a failing
// test to show what the server saw.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Exited returns nil while the server runs or after Stop (or Kill), and,
// once its process exited on its own (it crashed), an error saying how,
// with its crash report or the tail of its log. The report is the
// evidence: redis-server installs its crash handler with SA_RESETHAND, so
// a kernel log line "segfault … in libgcc_s" most likely shows a second
// fault, in the handler unwinding the stack for that report.
func (s *Server) Exited() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
	default:
		return nil
	}
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	text := string(b)
	name := filepath.Base(s.bin)
	if i := strings.Index(text, "=== REDIS BUG REPORT START"); i >= 0 {
		head, _, _ := strings.Cut(text[i:], "------ INFO OUTPUT")
		return fmt.Errorf("%s %s (pid %d) exited (%v); its crash report:\n%s", name, s.Addr, cmd.Process.Pid, cmd.ProcessState, firstLines(head, 30))
	}
	return fmt.Errorf("%s %s (pid %d) exited (%v); the tail of its log:\n%s", name, s.Addr, cmd.Process.Pid, cmd.ProcessState, lastLines(text, 20))
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Running reports whether the process was started and not stopped (it may
// be frozen, or have crashed: see Exited).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Pid returns the process's id, or 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Signal sends sig to the process (SIGSTOP freezes it, SIGCONT resumes it).
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redistest: server %s is not running", s.Addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	switch sig {
	case syscall.SIGSTOP:
		s.frozen = true
	case syscall.SIGCONT:
		s.frozen = false
	}
	return nil
}

// Freeze stops the process with SIGSTOP: connections stay open and nothing answers.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Thaw resumes a frozen process with SIGCONT.
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Kill ends the process with SIGKILL and waits for it to exit. Its data is
// lost unless it was started with persistence.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.Stop()
}

// Stop ends the process with SIGKILL (a frozen one too) and waits for it
// to exit; it does nothing when the process is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart kills the process if it runs and starts it again on the same port
// and directory.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Relaunch(); err != nil {
		t.Fatalf("redistest: restart %s: %v", s.Addr, err)
	}
}

// Relaunch is Restart for a caller without a testing.TB.
func (s *Server) Relaunch() error {
	s.Stop()
	var err error
	for range 20 { // the port may linger briefly after a kill
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}
