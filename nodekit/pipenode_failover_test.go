package nodekit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// TestPipeNodeFailoverSentinel runs the failover strategy over a Sentinel
// client: a primary with two replicas behind one Sentinel.
func TestPipeNodeFailoverSentinel(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2, Sentinels: 1, DownAfter: time.Second})
		client := d.open(t, pipeOptions{addrs: topo.SentinelAddrs(), master: topo.Master})
		node := client.node
		ctx := context.Background()
		const ttl = 30 * time.Second

		t.Run("conformance", func(t *testing.T) {
			topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Quorum: 1, Servers: []string{topo.Primary.Addr}}
			// WAIT's timeout is the longest the suite's 200ms TTLs allow
			// (it must stay below the TTL less its drift margin): with
			// 50ms, both replicas' acknowledgements came too late on a
			// loaded machine under -race, and SlowLease was refused.
			newStrategy := func(nodes []driver.Node) (driver.Strategy, error) {
				return strategy.NewFailover(nodes[0], strategy.WithWaitTimeout(150*time.Millisecond))
			}
			conformance.RunStrategy(t, topology, newStrategy)
			family.Run(t, topology.Nodes, newStrategy)
		})

		t.Run("granted once both replicas hold the lock", func(t *testing.T) {
			// WAIT's timeout is 2s, not the default 100ms: the subject is
			// what both replicas hold, and on a loaded machine one
			// replica's acknowledgement came after 100ms (the frozen
			// replica below is refused after it).
			f, err := strategy.NewFailover(node, strategy.WithWaitTimeout(2*time.Second))
			require.NoError(t, err)
			lease, err := f.Acquire(ctx, "both", "tok", ttl)
			require.NoError(t, err)
			for _, r := range topo.Replicas {
				assert.Regexp(t, "^[0-9]+:tok$", r.Client(t).Get(ctx, "dlm:{both}").Val(), "on replica %s", r.Addr)
			}
			require.NoError(t, f.Release(ctx, "both", "tok"))
			assert.NotZero(t, lease.Fence)

			// With a replica frozen, AckAll refuses and rolls back.
			topo.Replicas[0].Freeze(t)
			_, err = f.Acquire(ctx, "frozen", "tok", ttl)
			topo.Replicas[0].Thaw(t)
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.Regexp(t, `: 1 of \d+ replicas acknowledged`, err.Error())
			assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "dlm:{frozen}").Val(), "rolled back")
		})

		t.Run("a client on a replica is not acquired", func(t *testing.T) {
			replica := d.node(t, pipeOptions{addrs: []string{topo.Replicas[0].Addr}})
			// Policy none sends the script straight away: READONLY.
			none, err := strategy.NewFailover(replica, strategy.WithAcks(strategy.AckNone()))
			require.NoError(t, err)
			_, err = none.Acquire(ctx, "ro", "tok", ttl)
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.ErrorContains(t, err, "READONLY")
			// Policies that wait probe first and find a replica.
			all, err := strategy.NewFailover(replica)
			require.NoError(t, err)
			_, err = all.Acquire(ctx, "ro", "tok", ttl)
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.ErrorContains(t, err, "replica")
			// Nothing reached any server.
			assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "dlm:{ro}").Val())
		})

		t.Run("the client follows Sentinel to the promoted replica", func(t *testing.T) {
			f, err := strategy.NewFailover(node, strategy.WithWaitTimeout(200*time.Millisecond))
			require.NoError(t, err)
			before, err := f.Acquire(ctx, "kept", "A", ttl)
			require.NoError(t, err, "acknowledged by both replicas")

			old := topo.Primary
			old.Kill(t)
			promoted := topo.WaitFailover(t, old, 30*time.Second)
			t.Logf("Sentinel promoted %s", promoted.Addr)

			var lease driver.Lease
			deadline := time.Now().Add(30 * time.Second)
			for try := 0; ; try++ {
				// A new token each time: a failed attempt's clean-up may land later.
				lease, err = f.Acquire(ctx, "after", fmt.Sprintf("B%d", try), ttl)
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			require.NoError(t, err, "the same client acquires on the new primary")
			assert.Contains(t, promoted.Client(t).Get(ctx, "dlm:{after}").Val(), "B", "the lock is on the promoted server")
			assert.Contains(t, client.known(), promoted.Addr, "the client now talks to the promoted server")
			assert.NotZero(t, lease.Fence)

			// The lock granted before the failover survived it.
			_, err = f.Acquire(ctx, "kept", "C", ttl)
			assert.ErrorIs(t, err, dlm.ErrHeld, "the promoted server still holds A's lock")
			require.NoError(t, f.Release(ctx, "kept", "A"), "A still holds it on the new primary")
			next, err := f.Acquire(ctx, "kept", "C", ttl)
			require.NoError(t, err)
			assert.Greater(t, next.Fence, before.Fence, "the fence carried over with the replicated lock")
		})
	})
}
