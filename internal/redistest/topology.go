package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client returns a go-redis client for s, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartCluster starts a Redis Cluster of n masters (no replicas) with the
// 16384 slots split evenly, and waits until it reports cluster_state:ok and
// every node has a connected bus link to every other (a PUBLISH reaches
// another node's subscribers only over that link).
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	nodes := StartN(t, n, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
	ctx := context.Background()
	for i, s := range nodes {
		c := s.Client(t)
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr, err)
		}
		if i > 0 {
			if err := c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(nodes[0].Port)).Err(); err != nil {
				t.Fatalf("redistest: CLUSTER MEET: %v", err)
			}
		}
	}
	waitFor(t, 20*time.Second, "cluster_state:ok on every node", func() bool {
		for _, s := range nodes {
			c := redis.NewClient(&redis.Options{Addr: s.Addr})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				return false
			}
		}
		return true
	})
	waitFor(t, 20*time.Second, "every cluster bus link connected", func() bool {
		for _, s := range nodes {
			if !linksConnected(s.Addr, n) {
				return false
			}
		}
		return true
	})
	return nodes
}

// linksConnected reports whether the node at addr lists n nodes in CLUSTER
// NODES, none still in handshake, each with its link connected.
func linksConnected(addr string, n int) bool {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	out, err := c.ClusterNodes(context.Background()).Result()
	if err != nil {
		return false
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n {
		return false
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 8 || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") || f[7] != "connected" {
			return false
		}
	}
	return true
}

// A Sentinel is a redis-sentinel process owned by a test.
type Sentinel struct {
	*Server
	password string // its requirepass; "" for none
}

// StartSentinel starts a redis-sentinel that monitors primary under the
// given master name with the given quorum, failing over after downAfter.
func StartSentinel(t testing.TB, master string, primary *Server, quorum int, downAfter time.Duration) *Sentinel {
	t.Helper()
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s 10000\n",
		master, primary.Port, quorum, master, downAfter.Milliseconds(), master)
	s := &Server{bin: Binary(t, "redis-sentinel"), dir: t.TempDir(), conf: conf}
	return &Sentinel{Server: launch(t, s)}
}

// ReplicaOf makes s a replica of primary and waits until the link is up.
func (s *Server) ReplicaOf(t testing.TB, primary *Server) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	if err := c.SlaveOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port)).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF: %v", err)
	}
	waitFor(t, 10*time.Second, s.Addr+" replicating from "+primary.Addr, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
}

// waitFor polls cond until it holds or the timeout passes, then fails t.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
