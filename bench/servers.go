package main

import (
	"bufio"
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
	"time"

	goredislib "github.com/redis/go-redis/v9"
)

// Topology is where the contenders run.
type Topology struct {
	Single []string // one address, for single-instance contenders
	Multi  []string // five addresses of independent masters, for Redlock contenders
	// Freeze makes a node silent (it keeps its connections and answers
	// nothing) and Thaw ends that. When nil, the silent-node scenario is skipped.
	Freeze, Thaw func(addr string) error
}

// servers are redis-server processes this run started.
type servers struct {
	mu    sync.Mutex
	procs map[string]*exec.Cmd
	dir   string
}

// startServers starts n redis-server processes on free loopback ports, with
// persistence off. They are killed by stop, and by the kernel if this
// process dies first.
func startServers(n int) (*servers, []string, error) {
	dir, err := os.MkdirTemp("", "dlmbench-")
	if err != nil {
		return nil, nil, err
	}
	s := &servers{procs: map[string]*exec.Cmd{}, dir: dir}
	addrs := make([]string, 0, n)
	for i := range n {
		var addr string
		var err error
		for range 5 {
			if addr, err = s.start(filepath.Join(dir, strconv.Itoa(i))); err == nil {
				break
			}
		}
		if err != nil {
			s.stop()
			return nil, nil, err
		}
		addrs = append(addrs, addr)
	}
	return s, addrs, nil
}

// serverArgs returns a free loopback address and the arguments of a
// redis-server serving it from dir, without persistence.
func serverArgs(dir string) (addr string, args []string, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return net.JoinHostPort("127.0.0.1", port), []string{"--port", port, "--bind", "127.0.0.1",
		"--dir", dir, "--logfile", "redis.log", "--save", "", "--appendonly", "no", "--daemonize", "no"}, nil
}

func (s *servers) start(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	addr, args, err := serverArgs(dir)
	if err != nil {
		return "", err
	}
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start redis-server (is it installed?): %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return "", fmt.Errorf("redis-server on %s exited: %s", addr, strings.TrimSpace(string(b)))
		default:
		}
		if ping(addr) == nil {
			s.mu.Lock()
			s.procs[addr] = cmd
			s.mu.Unlock()
			return addr, nil
		}
	}
	_ = cmd.Process.Kill()
	return "", fmt.Errorf("redis-server on %s not ready after 10s", addr)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

func (s *servers) signal(addr string, sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.procs[addr]
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("no server of this run at %s", addr)
	}
	return cmd.Process.Signal(sig)
}

// Freeze stops the server with SIGSTOP.
func (s *servers) Freeze(addr string) error { return s.signal(addr, syscall.SIGSTOP) }

// Thaw resumes it with SIGCONT.
func (s *servers) Thaw(addr string) error { return s.signal(addr, syscall.SIGCONT) }

// stop kills every server and removes their directories.
func (s *servers) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range s.procs {
		_ = cmd.Process.Kill()
	}
	s.procs = map[string]*exec.Cmd{}
	_ = os.RemoveAll(s.dir)
}

// serverStats are counters read from INFO.
type serverStats struct {
	CPU   float64 // used_cpu_sys + used_cpu_user, seconds
	Calls int64   // total commands processed
}

func info(ctx context.Context, addr string) (map[string]string, error) {
	c := goredislib.NewClient(&goredislib.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 1})
	defer c.Close()
	s, err := c.Info(ctx, "server", "cpu", "stats").Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

func readStats(ctx context.Context, addr string) (serverStats, error) {
	m, err := info(ctx, addr)
	if err != nil {
		return serverStats{}, err
	}
	sys, err1 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	user, err2 := strconv.ParseFloat(m["used_cpu_user"], 64)
	calls, err3 := strconv.ParseInt(m["total_commands_processed"], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return serverStats{}, fmt.Errorf("INFO from %s: %w", addr, err)
	}
	return serverStats{CPU: sys + user, Calls: calls}, nil
}

// readAllStats is readStats summed over addrs.
func readAllStats(ctx context.Context, addrs []string) (serverStats, error) {
	var sum serverStats
	for _, a := range addrs {
		st, err := readStats(ctx, a)
		if err != nil {
			return serverStats{}, err
		}
		sum.CPU += st.CPU
		sum.Calls += st.Calls
	}
	return sum, nil
}

// cleanKeys deletes every key the run made (they all contain "bench:c",
// whatever prefix a library adds) so the servers stay small between
// scenarios; other keys on servers given by address are left alone.
func cleanKeys(ctx context.Context, addrs []string) error {
	var errs []error
	for _, a := range addrs {
		c := goredislib.NewClient(&goredislib.Options{Addr: a, ContextTimeoutEnabled: true, PoolSize: 1})
		it := c.Scan(ctx, 0, "*bench:c*", 1000).Iterator()
		var batch []string
		for it.Next(ctx) {
			if batch = append(batch, it.Val()); len(batch) == 1000 {
				errs = append(errs, c.Unlink(ctx, batch...).Err())
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			errs = append(errs, c.Unlink(ctx, batch...).Err())
		}
		errs = append(errs, it.Err())
		c.Close()
	}
	return errors.Join(errs...)
}
