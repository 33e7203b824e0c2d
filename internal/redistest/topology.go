package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// options are the go-redis options for s: its address, and its TLS
// configuration when it speaks TLS.
func (s *Server) options() *redis.Options {
	return &redis.Options{Addr: s.Addr, TLSConfig: s.TLS()}
}

// Client returns a go-redis client for s, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartCluster starts a Redis Cluster of n masters (no replicas) with the
// 16384 slots split evenly, and waits until it reports cluster_state:ok and
// every node has a connected bus link to every other (a PUBLISH reaches
// another node's subscribers only over that link).
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	return StartClusterReplicas(t, make([]int, n)...).Masters
}

// A Cluster is a Redis Cluster owned by a test: Masters[i] serves the i-th
// of equal slot ranges and Replicas[i] replicate it.
type Cluster struct {
	Masters  []*Server
	Replicas [][]*Server
}

// StartClusterReplicas starts a Redis Cluster with one master per element of
// replicas, which says how many replicas that master gets, and waits as
// StartCluster does, and until WAIT on every master counts its replicas.
func StartClusterReplicas(t testing.TB, replicas ...int) *Cluster {
	t.Helper()
	return startCluster(t, nil, replicas)
}

// StartClusterTLS is StartClusterReplicas for nodes that speak TLS only,
// to clients and to each other (tls-cluster), with the certificates of
// certs.
func StartClusterTLS(t testing.TB, certs *Certs, replicas ...int) *Cluster {
	t.Helper()
	return startCluster(t, certs, replicas)
}

func startCluster(t testing.TB, certs *Certs, replicas []int) *Cluster {
	t.Helper()
	cl := startClusterNodes(t, certs, replicas)
	nodes := cl.nodes()
	cl.assignSlots(t)
	meet(t, nodes)
	cl.replicate(t)
	waitClusterFormed(t, cl, nodes)
	for i, m := range cl.Masters {
		mc := m.Client(t)
		waitFor(t, 60*time.Second, m.Addr+" reporting its replicas online", func() bool {
			info, err := mc.Info(context.Background(), "replication").Result()
			return err == nil && strings.Count(info, ",state=online,") == len(cl.Replicas[i])
		})
		waitAcked(t, m)
	}
	return cl
}

// startClusterNodes starts a master for each entry of replicas and that
// many replicas for it, cluster-enabled (with TLS between them if certs),
// not yet joined.
func startClusterNodes(t testing.TB, certs *Certs, replicas []int) *Cluster {
	t.Helper()
	// A replica whose master has been down longer than 10s plus ten node
	// timeouts never stands for election by default (its data counts as
	// too old): on a loaded machine where elections fail for that long, the
	// cluster would stay down for good. Validity factor 0: it always
	// stands.
	args := []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--cluster-replica-validity-factor", "0"}
	start := func(k int) []*Server {
		if certs == nil {
			return StartN(t, k, args...)
		}
		s := make([]*Server, k)
		for i := range s {
			s[i] = StartTLS(t, certs, append(args, "--tls-cluster", "yes")...)
		}
		return s
	}
	cl := &Cluster{Masters: start(len(replicas)), Replicas: make([][]*Server, len(replicas))}
	for i, r := range replicas {
		cl.Replicas[i] = start(r)
	}
	return cl
}

// nodes returns the masters, then each master's replicas.
func (cl *Cluster) nodes() []*Server {
	nodes := slices.Clone(cl.Masters)
	for _, r := range cl.Replicas {
		nodes = append(nodes, r...)
	}
	return nodes
}

// assignSlots gives the i-th master the i-th share of the slots.
func (cl *Cluster) assignSlots(t testing.TB) {
	t.Helper()
	n := len(cl.Masters)
	for i, s := range cl.Masters {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := s.Client(t).Do(context.Background(), "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr, err)
		}
	}
}

// meet introduces every node to the first.
func meet(t testing.TB, nodes []*Server) {
	t.Helper()
	for _, s := range nodes[1:] {
		if err := s.Client(t).ClusterMeet(context.Background(), "127.0.0.1", strconv.Itoa(nodes[0].Port)).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET: %v", err)
		}
	}
}

// replicate makes each replica follow its master, once it knows it.
func (cl *Cluster) replicate(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for i, m := range cl.Masters {
		if len(cl.Replicas[i]) == 0 {
			continue
		}
		id, err := m.Client(t).ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", m.Addr, err)
		}
		for _, r := range cl.Replicas[i] {
			rc := r.Client(t)
			// A replica must know the master before it can follow it.
			waitFor(t, 20*time.Second, r.Addr+" knowing "+m.Addr, func() bool {
				return rc.Do(ctx, "CLUSTER", "REPLICATE", id).Err() == nil
			})
		}
	}
}

// waitClusterFormed waits until every node of cl says the cluster is ok
// and knows every node, has its bus links connected, and knows every
// replica as one.
func waitClusterFormed(t testing.TB, cl *Cluster, nodes []*Server) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 30*time.Second, "cluster_state:ok on every node", func() bool {
		for _, s := range nodes {
			c := redis.NewClient(s.options())
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(nodes))) {
				return false
			}
		}
		return true
	})
	waitFor(t, 30*time.Second, "every cluster bus link connected", func() bool {
		for _, s := range nodes {
			if !linksConnected(s, len(nodes)) {
				return false
			}
		}
		return true
	})
	total := 0
	for _, r := range cl.Replicas {
		total += len(r)
	}
	waitFor(t, 30*time.Second, "every node knowing every replica as one", func() bool {
		for _, s := range nodes { // gossip: a node may still list a new replica as a master
			c := redis.NewClient(s.options())
			out, err := c.ClusterNodes(ctx).Result()
			_ = c.Close()
			if err != nil || strings.Count(out, " slave ")+strings.Count(out, ",slave ") != total {
				return false
			}
		}
		return true
	})
}

// linksConnected reports whether the node s lists n nodes in CLUSTER
// NODES, none still in handshake, each with its link connected.
func linksConnected(s *Server, n int) bool {
	c := redis.NewClient(s.options())
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

// ReplicaOf makes s a replica of primary and waits until the link is up and
// WAIT on primary counts s.
func (s *Server) ReplicaOf(t testing.TB, primary *Server) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(s.options())
	defer c.Close()
	if err := c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(primary.Port)).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF: %v", err)
	}
	waitFor(t, 10*time.Second, s.Addr+" replicating from "+primary.Addr, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	waitAcked(t, primary)
}

// waitAcked waits until WAIT on primary counts every replica it has
// connected. After a sync, a replica is sent writes (and acknowledges them)
// only from its first periodic acknowledgement, up to a second later.
func waitAcked(t testing.TB, primary *Server) {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(primary.options())
	defer c.Close()
	waitFor(t, 10*time.Second, "replicas of "+primary.Addr+" acknowledging writes", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return false
		}
		var connected int
		i := strings.Index(info, "connected_slaves:")
		if i < 0 {
			return false
		}
		if _, err := fmt.Sscanf(info[i:], "connected_slaves:%d", &connected); err != nil {
			return false
		}
		pipe := c.Pipeline()
		pipe.Set(ctx, "redistest:acked", "1", 0)
		pipe.Del(ctx, "redistest:acked")
		acked := pipe.Do(ctx, "WAIT", connected, 50)
		_, _ = pipe.Exec(ctx)
		n, err := acked.Int()
		return err == nil && n >= connected
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

// MigrateSlot moves hash slot slot from master from to master to of a
// running Cluster as redis-cli's resharding does: BeginMigration, its keys
// MIGRATEd batch at a time with pause between batches (so that a test can
// act while the slot is split between the two), and FinishMigration.
func (cl *Cluster) MigrateSlot(t testing.TB, slot int, from, to *Server, batch int, pause time.Duration) {
	t.Helper()
	cl.BeginMigration(t, slot, from, to)
	cl.FinishMigration(t, slot, from, to, batch, pause)
}

// BeginMigration marks slot importing on to and migrating on from: from
// still serves the slot's keys it has, and a call on several keys of the
// slot of which it lacks some gets TRYAGAIN.
func (cl *Cluster) BeginMigration(t testing.TB, slot int, from, to *Server) {
	t.Helper()
	do(t, to, "CLUSTER", "SETSLOT", slot, "IMPORTING", nodeID(t, from))
	do(t, from, "CLUSTER", "SETSLOT", slot, "MIGRATING", nodeID(t, to))
}

// FinishMigration moves the keys of slot, which BeginMigration marked,
// from from to to as MigrateSlot says, and gives the slot to to on every
// master.
func (cl *Cluster) FinishMigration(t testing.TB, slot int, from, to *Server, batch int, pause time.Duration) {
	t.Helper()
	ctx := context.Background()
	fc := from.Client(t)
	for {
		keys, err := fc.ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			t.Fatalf("redistest: CLUSTER GETKEYSINSLOT: %v", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := fc.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: MIGRATE from %s: %v", from.Addr, err)
		}
		time.Sleep(pause)
	}
	id := nodeID(t, to)
	do(t, to, "CLUSTER", "SETSLOT", slot, "NODE", id)
	do(t, from, "CLUSTER", "SETSLOT", slot, "NODE", id)
	for _, m := range cl.Masters {
		if m != from && m != to {
			do(t, m, "CLUSTER", "SETSLOT", slot, "NODE", id)
		}
	}
}

func nodeID(t testing.TB, s *Server) string {
	t.Helper()
	id, err := s.Client(t).ClusterMyID(context.Background()).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
	}
	return id
}

func do(t testing.TB, s *Server, args ...any) {
	t.Helper()
	if err := s.Client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redistest: %v on %s: %v", args, s.Addr, err)
	}
}

// takeoverAfter is how long KillMaster waits for the Cluster to promote a
// replica by its own election before it makes the replica take over.
const takeoverAfter = 15 * time.Second

// KillMaster kills Masters[i] as a crash would (SIGKILL) and sees its first
// replica promoted: by the Cluster's own election or, when that has not
// happened within takeoverAfter, by CLUSTER FAILOVER TAKEOVER on the
// replica, which needs no votes, as an operator would do. On a loaded
// machine the election can fail for minutes (seen: a replica asked for
// votes 7 times in 60s and the masters sent none), and tests that use this
// are about the client following a failover, not about Redis's election.
// The watch ends with the test.
func (c *Cluster) KillMaster(t testing.TB, i int) {
	t.Helper()
	replica := c.Replicas[i][0].Client(t)
	c.Masters[i].Kill(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			return
		case <-time.After(takeoverAfter):
		}
		if role, err := replica.Do(ctx, "ROLE").Slice(); ctx.Err() != nil || err == nil && len(role) > 0 && role[0] == "master" {
			return
		}
		err := replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err()
		t.Logf("redistest: %s not promoted %v after its master's kill; CLUSTER FAILOVER TAKEOVER: %v", c.Replicas[i][0].Addr, takeoverAfter, err)
	}()
}
