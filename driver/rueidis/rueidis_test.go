package rueidis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
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

// conform runs both suites over one node.
func conform(t *testing.T, node dlm.Node) {
	t.Run("Node", func(t *testing.T) {
		conformance.RunNode(t, func(*testing.T) dlm.Node { return node })
	})
	t.Run("Single", func(t *testing.T) {
		conformance.RunStrategy(t, conformance.Topology{Nodes: func(*testing.T) []dlm.Node { return []dlm.Node{node} }},
			func(nodes []dlm.Node) (dlm.Strategy, error) { return strategy.NewSingle(nodes[0]) })
	})
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Start(t)
	conform(t, rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr}})))
}

func TestConformanceNoAutoPipelining(t *testing.T) {
	srv := redistest.Start(t)
	node := rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableAutoPipelining: true}))
	conformance.RunNode(t, func(*testing.T) dlm.Node { return node })
}

func TestConformanceSentinel(t *testing.T) {
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "mymaster", primary, 1, time.Second)
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{sentinel.Addr}, Sentinel: rueidis.SentinelOption{MasterSet: "mymaster"}})
	node := rueidisnode.New(c)
	if !strings.Contains(node.String(), primary.Addr) {
		t.Errorf("a Sentinel client's node is named %q, want the primary's address %s in it", node.String(), primary.Addr)
	}
	conform(t, node)
}

func TestConformanceCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	conform(t, rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{nodes[0].Addr}})))
}

func TestClusterKeysInDifferentSlots(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	n := rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{nodes[0].Addr}}))
	_, err := eval(context.Background(), n, "return {1}", "a", "b")
	if !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("keys in different slots: %v, want an error matching dlm.ErrInvalid, not a panic", err)
	}
}

func TestNilClient(t *testing.T) {
	if n := rueidisnode.New(nil); n != nil {
		t.Fatalf("New(nil) = %v, want nil", n)
	}
}

// A frozen server (SIGSTOP) never answers; the call returns at its deadline.
func TestDeadlineOnFrozenServer(t *testing.T) {
	for _, auto := range []bool{true, false} {
		srv := redistest.Start(t)
		n := rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableAutoPipelining: !auto}))
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
