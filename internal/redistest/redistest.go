// Package redistest starts real redis-server processes on loopback ports for
// tests, and freezes, kills and restarts them to inject faults.
//
// When redis-server is not on PATH, tests that need it are skipped with a
// message, unless DLM_REQUIRE_REDIS=1 is set (as CI does): then they fail.
package redistest

import (
	"bufio"
	"crypto/tls"
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

// A Server is a redis-server process owned by a test.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int

	bin   string
	dir   string
	args  []string // after the port and defaults; a config file comes first
	conf  string   // config file written before each start, if any
	certs *Certs   // the certificates of a server that speaks TLS only; nil for plain
	env   []string // added to the process's environment (a Clock's shim)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	frozen bool
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
	var err error
	for range 5 {
		s.Port, err = freePort()
		if err != nil {
			continue
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: start %s: %v", filepath.Base(s.bin), err)
	}
	t.Cleanup(s.stop)
	return s
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
	args = append(args, "--bind", "127.0.0.1",
		"--dir", s.dir, "--logfile", "redis.log",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// The server dies with the test process however it ends (a watchdog's
	// exit, a panic, SIGKILL), not only through the test's Cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.frozen = cmd, exited, false
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, s.logTail())
		default:
		}
		if pingTLS(s.Addr, s.TLS()) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on port %d not ready after 10s: %s", s.Port, s.logTail())
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

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

func (s *Server) signal(sig syscall.Signal) error {
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
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// Thaw resumes a frozen process with SIGCONT.
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// Kill ends the process with SIGKILL and waits for it to exit. Its data is
// lost unless it was started with persistence.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.kill()
}

func (s *Server) kill() {
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
	s.kill()
	var err error
	for range 20 { // the port may linger briefly after a kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: restart %s: %v", s.Addr, err)
}

func (s *Server) stop() { s.kill() }
