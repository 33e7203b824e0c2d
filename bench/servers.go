package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Topology is where the contenders run.
type Topology struct {
	Single []string // one address, for single-instance contenders
	Multi  []string // five addresses of independent masters, for Redlock contenders
	// Freeze makes a node silent (it keeps its connections and answers
	// nothing) and Thaw ends that. When nil, the silent-node scenario is skipped.
	Freeze, Thaw func(addr string) error
	// Pin puts this process and every server on one CPU for a scenario
	// that asks for it (servers.Pin), and returns what undoes it; nil when
	// the run cannot (servers it did not start, or not Linux), and such a
	// scenario then runs where the scheduler puts it.
	Pin func() (undo func(), err error)
}

// servers are redis-server processes this run started, by
// internal/redistest's launcher.
type servers struct {
	byAddr map[string]*redistest.Server
	dir    string
}

// startServers starts n redis-server processes on free loopback ports, with
// persistence off. They are killed by stop, and by the kernel if this
// process dies first.
func startServers(n int) (*servers, []string, error) {
	dir, err := os.MkdirTemp("", "dlmbench-")
	if err != nil {
		return nil, nil, err
	}
	s := &servers{byAddr: map[string]*redistest.Server{}, dir: dir}
	addrs := make([]string, 0, n)
	for i := range n {
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			s.stop()
			return nil, nil, err
		}
		srv, err := redistest.Launch(redistest.Config{Dir: d})
		if err != nil {
			s.stop()
			return nil, nil, fmt.Errorf("start redis-server (is it installed?): %w", err)
		}
		s.byAddr[srv.Addr] = srv
		addrs = append(addrs, srv.Addr)
	}
	return s, addrs, nil
}

func (s *servers) signal(addr string, sig syscall.Signal) error {
	srv := s.byAddr[addr]
	if srv == nil {
		return fmt.Errorf("no server of this run at %s", addr)
	}
	return srv.Signal(sig)
}

// Freeze stops the server with SIGSTOP.
func (s *servers) Freeze(addr string) error { return s.signal(addr, syscall.SIGSTOP) }

// Thaw resumes it with SIGCONT.
func (s *servers) Thaw(addr string) error { return s.signal(addr, syscall.SIGCONT) }

// stop kills every server and removes their directories.
func (s *servers) stop() {
	for _, srv := range s.byAddr {
		srv.Stop()
	}
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
