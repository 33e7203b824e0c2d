package goredis_test

import (
	"context"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// The suites over more of go-redis than TestConformance's default client:
// the strategies' and the lock family's suites, a Cluster and a failover
// client (ContextTimeoutEnabled and Dial through Sentinel: TestServerMatrix).

// TestConformance over clients with ContextTimeoutEnabled, and with Dial's
// way to a primary through Sentinel, is TestServerMatrix/redis-7.0/Node:
// the same harness.Run on the same redis-server (the matrix's Redis 7.0 is
// the one on PATH), so it is not run twice.

// dialSentinel is Dial's way to a primary through Sentinel, for the
// harness.
func dialSentinel(t *testing.T, addrs []string, master string) (driver.Node, error) {
	n, c, err := goredis.Dial(context.Background(), nodekit.Endpoint{Sentinels: addrs, Master: master})
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return n, err
}

// The single-instance strategy keeps the Strategy contract, and the lock
// family theirs, over a client with go-redis's defaults (MaxRetries 3
// among them). Over a client with ContextTimeoutEnabled the same suites
// run in TestServerMatrix/redis-7.0/Single (the redis-server on PATH).
func TestConformanceSingle(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	addr := harness.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	node := goredis.New(c)
	topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: []string{addr}}
	newStrategy := func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) }
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}

// TestCluster runs on one Cluster of three masters (a Cluster takes
// seconds to form, and these used to start one each): the node rules over
// a Cluster client with ContextTimeoutEnabled (it was
// TestConformanceCluster), then, each on masters emptied of keys and
// scripts, clusterClient, watchCluster, runMany and runWaitCluster (they
// were TestClusterClient, TestWatchCluster, TestRunMany/cluster and
// TestRunWait/cluster).
func TestCluster(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	nodes := redistest.StartCluster(t, 3)
	t.Run("Conformance", func(t *testing.T) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		node := goredis.New(c)
		conformance.RunNode(t, func(*testing.T) driver.Node { return node })
	})
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, nodes []*redistest.Server)
	}{
		{"Client", clusterClient},
		{"Watch", watchCluster},
		{"RunMany", func(t *testing.T, nodes []*redistest.Server) {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
			t.Cleanup(func() { _ = c.Close() })
			runMany(t, c, false)
		}},
		{"RunWait", runWaitCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emptyMasters(t, nodes)
			tc.run(t, nodes)
		})
	}
}

// emptyMasters deletes every key and script of the Cluster's masters, so
// that a test on a shared Cluster begins as on a new one.
func emptyMasters(t *testing.T, masters []*redistest.Server) {
	t.Helper()
	ctx := context.Background()
	for _, m := range masters {
		c := m.Client(t)
		require.NoError(t, c.FlushAll(ctx).Err(), "FLUSHALL on %s", m.Addr)
		require.NoError(t, c.ScriptFlush(ctx).Err(), "SCRIPT FLUSH on %s", m.Addr)
	}
}

// The failover strategy keeps the Strategy contract over a go-redis
// failover client: a primary with two replicas found through Sentinel, and
// every grant acknowledged by both replicas.
func TestConformanceFailover(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2, Sentinels: 1})
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: topo.Master, SentinelAddrs: topo.SentinelAddrs(), ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	node := goredis.New(c)
	topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: []string{topo.Primary.Addr}}
	newStrategy := func(nodes []driver.Node) (driver.Strategy, error) {
		return strategy.NewFailover(nodes[0], strategy.WithAcks(strategy.AckAll()), strategy.WithReplicas(2))
	}
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}
