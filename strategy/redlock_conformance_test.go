package strategy_test

import (
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/strategy"
)

// TestRedlockConformance runs the strategy contract and the lock family's
// rules over five real
// redis-server processes with a quorum of three. The per-node timeout is 1s:
// SlowLease delays every node by 300ms and expects a lock (a node slower than
// the per-node timeout counts as failed), and SlowBeyondDeadline bounds the
// call by a 200ms context, which ends the calls before the per-node timeout.
func TestRedlockConformance(t *testing.T) {
	c := startClusterWith(t, 5, ctxClient)
	var servers []string
	for _, s := range c.servers {
		servers = append(servers, s.Addr)
	}
	topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return c.nodes }, Quorum: 3, Servers: servers}
	newStrategy := func(nodes []driver.Node) (driver.Strategy, error) {
		return strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
	}
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}
