package faults

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A proxied single-server topology: the server starts in its host's
// namespace, answers through the proxy in the runner, keeps its log in
// redis.log, and a kill with a wipe and a restart bring it back empty on
// the same address.
func TestTopologyKillRestart(t *testing.T) {
	t.Parallel()
	needRoot(t)
	n, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dir := t.TempDir()
	topo, err := startTopology(n, dir, "single", false, true, false, time.Second)
	if topo != nil {
		defer topo.stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: topo.proxies[0].Addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	s := topo.Data[0]
	if _, err := os.Stat(filepath.Join(s.dir, "redis.log")); err != nil {
		t.Errorf("the server's log: %v", err)
	}
	s.kill()
	if s.up() {
		t.Fatal("up after kill")
	}
	if err := s.wipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer direct.Close()
	if n, err := direct.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("after kill, wipe and restart: EXISTS k = %d, %v; want an empty server", n, err)
	}
	// The log outlives the wipe: it tells both runs (keepLogs copies it).
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if runs := strings.Count(string(b), "Ready to accept connections"); runs != 2 {
		t.Errorf("redis.log tells %d runs, want 2:\n%s", runs, b)
	}
}
