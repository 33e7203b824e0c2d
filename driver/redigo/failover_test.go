package redigo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// The failover strategy keeps the Strategy contract over redigo, on a
// primary with two replicas and policy all: every grant waits for both.
func TestFailoverConformance(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2})
	node := newNode(t, topo.Primary.Addr)
	topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Quorum: 1, Servers: []string{topo.Primary.Addr}}
	newStrategy := func(nodes []driver.Node) (driver.Strategy, error) {
		return strategy.NewFailover(nodes[0], strategy.WithAcks(strategy.AckAll()), strategy.WithReplicas(2))
	}
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}

// A pool pointed at a replica from the start is refused by the strategy's
// probe; a pool still pointed at a primary that was demoted since (a stale
// primary) gets READONLY, or is found a replica by the probe before the
// first write to a hash slot. Either way the lock is not acquired.
func TestFailoverStalePrimary(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1})
	ctx := context.Background()
	const ttl = 10 * time.Second

	replica, err := strategy.NewFailover(newNode(t, topo.Replicas[0].Addr))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := replica.Acquire(ctx, "stale", "tok", ttl); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("Acquire on a replica: %+v, %v; want an error matching dlm.ErrNotAcquired", l, err)
	}

	f, err := strategy.NewFailover(newNode(t, topo.Primary.Addr), strategy.WithAcks(strategy.AckAll()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Acquire(ctx, "before", "tok", ttl); err != nil {
		t.Fatalf("Acquire on the primary: %v", err)
	}
	// The replica takes over and the old primary follows it, as after a
	// failover the pool has not noticed.
	topo.Replicas[0].Client(t).ReplicaOf(ctx, "NO", "ONE")
	topo.Primary.ReplicaOf(t, topo.Replicas[0])
	m, err := dlm.New(f)
	if err != nil {
		t.Fatal(err)
	}
	// A key whose slot the strategy wrote to before: no probe, the write
	// itself is refused.
	for i := range 2 { // EVAL first, then EVALSHA with the script cached
		lease, err := f.Acquire(ctx, "before", "tok", ttl)
		if err == nil {
			t.Fatalf("Acquire %d on a demoted primary granted %+v", i+1, lease)
		}
		if !errors.Is(err, dlm.ErrNotAcquired) || !strings.Contains(err.Error(), "READONLY") {
			t.Fatalf("Acquire %d on a demoted primary: %v, want READONLY matching dlm.ErrNotAcquired", i+1, err)
		}
	}
	// A key of a slot not written to yet: the probe finds a replica.
	if l, err := m.TryLock(ctx, "stale"); !errors.Is(err, dlm.ErrNotAcquired) || !strings.Contains(err.Error(), "is a replica") {
		t.Fatalf("TryLock through a demoted primary: %v, %v; want dlm.ErrNotAcquired saying it is a replica", l, err)
	}
}
