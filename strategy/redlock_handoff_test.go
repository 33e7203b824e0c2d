package strategy_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/strategy"
)

// A Redlock hand-off granted by a majority releases the old token's lock
// on the node that did not take part, once it answers again: that node is
// free for the next owner rather than held until the old TTL.
func TestRedlockHandoffReleasesTheRest(t *testing.T) {
	c := startCluster(t, 3)
	faulty := make([]*conformance.FaultyNode, len(c.nodes))
	nodes := make([]driver.Node, len(c.nodes))
	for i, n := range c.nodes {
		faulty[i] = conformance.Wrap(n)
		nodes[i] = faulty[i]
	}
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	a, err := r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	require.True(t, c.holdsAll(t, "k", "A"))

	faulty[0].Set(conformance.Fault{Down: true})
	b, err := r.(driver.Handoff).Handoff(ctx, "k", "A", "B", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, b.Fence, a.Fence)
	assert.Equal(t, "B", c.holder(t, 1, "k"))
	assert.Equal(t, "B", c.holder(t, 2, "k"))
	assert.Equal(t, "A", c.holder(t, 0, "k"), "the node that was down still has the old lock")

	faulty[0].Heal()
	require.Eventually(t, func() bool { return c.holder(t, 0, "k") == "" }, 3*time.Second, 10*time.Millisecond,
		"the old lock released on the node that missed the hand-off")
	require.NoError(t, r.Release(ctx, "k", "B"))
	require.True(t, c.holdsAll(t, "k", ""))
}

// A Redlock hand-off from a token that holds the key on a minority only
// is refused, matching dlm.ErrNotHeld, and leaves the holder's lock alone.
func TestRedlockHandoffFromMinorityRefused(t *testing.T) {
	c := startCluster(t, 3)
	r := c.redlock(t, strategy.WithTimeout(time.Second))
	ctx := context.Background()
	_, err := r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	// A lost the key on two nodes (their data was lost), and B took it there.
	for i := range 2 {
		require.NoError(t, c.clients[i].Del(ctx, lockKey("k")).Err())
		require.NoError(t, c.clients[i].Set(ctx, lockKey("k"), "1:B", time.Minute).Err())
	}
	_, err = r.Handoff(ctx, "k", "A", "C", time.Minute)
	require.ErrorIs(t, err, dlm.ErrNotHeld)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	var qe *strategy.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "B", c.holder(t, 0, "k"))
	assert.Equal(t, "B", c.holder(t, 1, "k"))
	assert.Eventually(t, func() bool { return c.holder(t, 2, "k") == "" }, 3*time.Second, 10*time.Millisecond,
		"C's grant on the third node undone")
}
