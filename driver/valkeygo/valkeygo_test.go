package valkeygo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/conformance/harness"
	valkeynode "github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

func newClient(t testing.TB, opt valkey.ClientOption) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("valkey.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// eval runs src with EVAL on n, as one Run call.
func eval(ctx context.Context, n dlm.Node, src string, keys ...string) ([]int64, error) {
	c := []dlm.Call{{Source: src, Keys: keys}}
	n.Run(ctx, c)
	return c[0].Reply, c[0].Err
}

// conform runs both suites over one node of a deployment the test started;
// servers are the addresses its scripts reach.
func conform(t *testing.T, node dlm.Node, servers ...string) {
	t.Run("Node", func(t *testing.T) {
		conformance.RunNode(t, func(*testing.T) dlm.Node { return node })
	})
	single(t, node, servers...)
}

// single runs the strategy suite with the single-instance strategy.
func single(t *testing.T, node dlm.Node, servers ...string) {
	t.Run("Single", func(t *testing.T) {
		topology := conformance.Topology{Nodes: func(*testing.T) []dlm.Node { return []dlm.Node{node} }, Servers: servers}
		newStrategy := func(nodes []dlm.Node) (dlm.Strategy, error) { return strategy.NewSingle(nodes[0]) }
		conformance.RunStrategy(t, topology, newStrategy)
		family.Run(t, topology.Nodes, newStrategy)
	})
}

func TestConformanceStandalone(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	t.Run("Node", func(t *testing.T) {
		harness.Run(t, func(t *testing.T, addr string) dlm.Node {
			return valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{addr}}))
		}, dialOptions...)
	})
	addr := harness.StartServer(t)
	single(t, valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{addr}})), addr)
}

// dialOptions give the harness Dial's ways to a server (valkey-go connects
// when a client is made, and the error may be the dial's) and to a primary
// through Sentinel.
var dialOptions = []harness.Option{
	harness.WithDial(func(t *testing.T, addr string) (dlm.Node, error) {
		return dialed(t, nodekit.Endpoint{Addr: addr})
	}),
	harness.WithSentinel(func(t *testing.T, addrs []string, master string) (dlm.Node, error) {
		return dialed(t, nodekit.Endpoint{Sentinels: addrs, Master: master})
	}),
}

func dialed(t *testing.T, ep nodekit.Endpoint) (dlm.Node, error) {
	n, c, err := valkeynode.Dial(context.Background(), ep)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return n, err
}

func TestConformanceNoAutoPipelining(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	harness.Run(t, func(t *testing.T, addr string) dlm.Node {
		return valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{addr}, DisableAutoPipelining: true}))
	}, dialOptions...)
}

func TestConformanceSentinel(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "mymaster", primary, 1, time.Second)
	c := newClient(t, valkey.ClientOption{InitAddress: []string{sentinel.Addr}, Sentinel: valkey.SentinelOption{MasterSet: "mymaster"}})
	node := valkeynode.New(c)
	if !strings.Contains(node.String(), primary.Addr) {
		t.Errorf("a Sentinel client's node is named %q, want the primary's address %s in it", node.String(), primary.Addr)
	}
	conform(t, node, primary.Addr)
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	nodes := redistest.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	conform(t, valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{nodes[0].Addr}})), addrs...)
}

func TestClusterKeysInDifferentSlots(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	n := valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{nodes[0].Addr}}))
	_, err := eval(context.Background(), n, "return {1}", "a", "b")
	if !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("keys in different slots: %v, want an error matching dlm.ErrInvalid, not a panic", err)
	}
}

func TestNilClient(t *testing.T) {
	if n := valkeynode.New(nil); n != nil {
		t.Fatalf("New(nil) = %v, want nil", n)
	}
}

// A frozen server (SIGSTOP) never answers; the call returns at its deadline.
func TestDeadlineOnFrozenServer(t *testing.T) {
	for _, auto := range []bool{true, false} {
		srv := redistest.Start(t)
		n := valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{srv.Addr}, DisableAutoPipelining: !auto}))
		if _, err := eval(context.Background(), n, "return {1}"); err != nil {
			t.Fatal(err)
		}
		srv.Freeze(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, err := eval(ctx, n, "return {1}")
		took := time.Since(start)
		cancel()
		srv.Thaw(t)
		if !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
			t.Errorf("auto-pipelining %v: Eval on a frozen server: %v after %v, want context.DeadlineExceeded near 100ms", auto, err, took)
		}
	}
}

// Issue 33: against a Sentinel's port valkey-go words "ERR unknown command"
// without "ERR "; Lock still ends at once with a permanent error instead
// of waiting out its context.
func TestLockEndsAtOnceOnASentinelsPort(t *testing.T) {
	sentinel := redistest.StartSentinel(t, "mymaster", redistest.Start(t), 1, 5*time.Second)
	n, c, err := valkeynode.Dial(context.Background(), nodekit.Endpoint{Addr: sentinel.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := strategy.NewSingle(n)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlm.New(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = m.Lock(ctx, "k")
	if !dlm.Permanent(err) || ctx.Err() != nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("Lock on a Sentinel's port: %v (permanent: %v; context: %v), want a permanent unknown command before the context ends", err, dlm.Permanent(err), ctx.Err())
	}
}

// TestConformanceRedlock runs the strategy suite with Redlock over three
// servers (quorum two), one valkey-go client each.
func TestConformanceRedlock(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	var nodes []dlm.Node
	var servers []string
	for range 3 {
		srv := redistest.Start(t)
		nodes = append(nodes, valkeynode.New(newClient(t, valkey.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})))
		servers = append(servers, srv.Addr)
	}
	topology := conformance.Topology{Nodes: func(*testing.T) []dlm.Node { return nodes }, Quorum: 2, Servers: servers}
	newStrategy := func(nodes []dlm.Node) (dlm.Strategy, error) {
		return strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
	}
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}
