package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server is one redis-server or redis-sentinel process on a host of its
// own.
type server struct {
	host *Host
	port int
	bin  string
	args []string // after the address; a sentinel's config file first
	dir  string
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd ended
}

func (s *server) addr() string { return fmt.Sprintf("%s:%d", s.host.IP, s.port) }

// start starts the process and waits until it answers PING.
func (s *server) start() error {
	args := append([]string{}, s.args...)
	args = append(args, "--bind", s.host.IP, "--port", fmt.Sprint(s.port), "--protected-mode", "no", "--dir", s.dir)
	s.cmd = s.host.Command(s.bin, args...)
	log, err := os.Create(filepath.Join(s.dir, "log"))
	if err != nil {
		return err
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { _ = cmd.Wait(); close(exit) }(s.cmd, s.exit)
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		select {
		case <-s.exit:
			b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			return fmt.Errorf("faults: %s %s exited: %s", s.bin, s.addr(), lastLines(string(b), 5))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faults: %s %s not ready: %v", s.bin, s.addr(), err)
		}
	}
}

func (s *server) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// kill ends the process with SIGKILL (resuming it first if stopped) and
// waits until it is gone.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.signal(syscall.SIGKILL)
	s.signal(syscall.SIGCONT)
	<-s.exit
	s.cmd = nil
}

// wipe deletes the server's files: a restart then starts empty.
func (s *server) wipe() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != "log" && !strings.HasSuffix(e.Name(), ".conf") {
			if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// A topology is the deployment of one strategy: the servers that hold
// locks (Data: the Redlock masters, the one server, or the primary first
// and then its replicas), the Sentinels, and the URL clients open.
type topology struct {
	Strategy  string
	Data      []*server
	Sentinels []*server
	URL       string
}

// Strategies the suite knows, as topologies to start.
var strategies = []string{"single", "redlock", "failover-ack-all", "failover-ack-none"}

// startTopology starts strategy's servers on hosts of n, files in dir; with
// persist, every data server writes an append-only file and fsyncs it on
// every write.
func startTopology(n *Net, dir, strategy string, persist bool, ttl time.Duration) (*topology, error) {
	t := &topology{Strategy: strategy}
	data := []string{"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"}
	if persist {
		data = []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0"}
	}
	add := func(name, bin string, port int, args ...string) (*server, error) {
		h, err := n.AddHost(name)
		if err != nil {
			return nil, err
		}
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		s := &server{host: h, port: port, bin: bin, args: args, dir: d}
		return s, s.start()
	}
	var addrs []string
	switch strategy {
	case "single", "redlock":
		count := 1
		if strategy == "redlock" {
			count = 5
		}
		for i := range count {
			s, err := add(fmt.Sprintf("r%d", i+1), "redis-server", 6379, data...)
			if err != nil {
				return t, err
			}
			t.Data = append(t.Data, s)
			addrs = append(addrs, s.addr())
		}
		t.URL = fmt.Sprintf("%s://%s?ttl=%v", strategy, strings.Join(addrs, ","), ttl)
	case "failover-ack-all", "failover-ack-none":
		p, err := add("primary", "redis-server", 6379, data...)
		if err != nil {
			return t, err
		}
		t.Data = append(t.Data, p)
		for i := range 2 {
			r, err := add(fmt.Sprintf("replica%d", i+1), "redis-server", 6379, append(data, "--replicaof", p.host.IP, "6379")...)
			if err != nil {
				return t, err
			}
			t.Data = append(t.Data, r)
		}
		if err := waitReplicas(p, 2); err != nil {
			return t, err
		}
		for i := range 3 {
			d := filepath.Join(dir, fmt.Sprintf("sentinel%d", i+1))
			if err := os.MkdirAll(d, 0o755); err != nil {
				return t, err
			}
			conf := filepath.Join(d, "sentinel.conf")
			if err := os.WriteFile(conf, []byte(fmt.Sprintf("sentinel monitor dlmf %s 6379 2\nsentinel down-after-milliseconds dlmf 1000\n"+
				"sentinel failover-timeout dlmf 3000\nsentinel parallel-syncs dlmf 2\n", p.host.IP)), 0o644); err != nil {
				return t, err
			}
			s, err := add(fmt.Sprintf("sentinel%d", i+1), "redis-sentinel", 26379, conf)
			if err != nil {
				return t, err
			}
			t.Sentinels = append(t.Sentinels, s)
			addrs = append(addrs, s.addr())
		}
		ack := strings.TrimPrefix(strategy, "failover-ack-")
		t.URL = fmt.Sprintf("sentinel://%s/dlmf?ack=%s&replicas=2&wait_timeout=%v&ttl=%v", strings.Join(addrs, ","), ack, ttl/4, ttl)
	default:
		return t, fmt.Errorf("faults: unknown strategy %q (known: %s)", strategy, strings.Join(strategies, ", "))
	}
	return t, nil
}

// waitReplicas waits until primary p has n replicas online.
func waitReplicas(p *server, n int) error {
	c := redis.NewClient(&redis.Options{Addr: p.addr()})
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Count(info, ",state=online,") == n {
			return nil
		}
	}
	return fmt.Errorf("faults: %s: %d replicas not online", p.addr(), n)
}

// stop kills every process of the topology.
func (t *topology) stop() {
	for _, s := range append(t.Data, t.Sentinels...) {
		s.kill()
	}
}
