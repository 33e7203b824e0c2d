package strategy_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/strategy"
)

// stallNode holds its next call back, as a stalled connection would: the
// caller gets its context's error at its deadline, and the call runs on the
// server once the gate opens, after calls made later on other connections.
type stallNode struct {
	driver.Node
	mu    sync.Mutex
	armed bool
	gate  chan struct{}
	ran   chan struct{} // closed once the held call ran
}

func newStallNode(t *testing.T, n driver.Node) *stallNode {
	s := &stallNode{Node: n, gate: make(chan struct{}), ran: make(chan struct{})}
	t.Cleanup(s.open)
	return s
}

func (s *stallNode) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

func (s *stallNode) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.gate:
	default:
		close(s.gate)
	}
}

func (s *stallNode) Run(ctx context.Context, calls []driver.Call) {
	s.mu.Lock()
	held := s.armed
	s.armed = false
	s.mu.Unlock()
	if !held {
		s.Node.Run(ctx, calls)
		return
	}
	late := slices.Clone(calls)
	go func() {
		<-s.gate
		s.Node.Run(context.Background(), late)
		close(s.ran)
	}()
	<-ctx.Done()
	for i := range calls {
		calls[i].Err = ctx.Err()
	}
}

// warm acquires and releases a key of its own through r, so that every
// node has the scripts cached.
func warm(t *testing.T, r *strategy.Redlock) {
	t.Helper()
	_, err := r.Acquire(context.Background(), "warm", "W", time.Minute)
	require.NoError(t, err)
	require.NoError(t, r.Release(context.Background(), "warm", "W"))
}

func (s *stallNode) String() string {
	return "stalled " + s.Node.(interface{ String() string }).String()
}

// lateGrant starts three servers and a Redlock over them whose first node
// holds its next call back, and acquires and releases "k" for token A
// through it: the acquisition is then still to run on the first node, and
// runs when the stallNode opens.
func lateGrant(t *testing.T) (*cluster, *stallNode, *strategy.Redlock) {
	t.Helper()
	c := startCluster(t, 3)
	stall := newStallNode(t, c.nodes[0])
	s, err := strategy.NewRedlock([]driver.Node{stall, c.nodes[1], c.nodes[2]}, strategy.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	r := s.(*strategy.Redlock)
	ctx := context.Background()
	warm(t, r) // the late call goes by EVALSHA: the script must be cached
	stall.arm()
	_, err = r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err, "granted by the two other nodes")
	require.NoError(t, r.Release(ctx, "k", "A"))
	require.Equal(t, "", c.holder(t, 0, "k"), "the release reached the stalled node before the acquisition")
	return c, stall, r
}

// An acquisition that a node runs after its caller gave up on it (the
// node timed out, the lock was granted by the others and released since)
// leaves no grant there for the lock's TTL: the Release settles that node
// until the grant can no longer appear.
func TestRedlockLateGrantSettledAfterRelease(t *testing.T) {
	c, stall, r := lateGrant(t)
	time.Sleep(300 * time.Millisecond) // past the acquisition's per-node timeout, and a recheck soon after
	stall.open()
	<-stall.ran
	require.Eventually(t, func() bool { return c.holder(t, 0, "k") == "" }, 3*time.Second, 10*time.Millisecond,
		"the late grant on the stalled node released, not left for the TTL")
	_, err := r.Acquire(context.Background(), "k", "B", time.Minute)
	require.NoError(t, err)
	require.True(t, c.holdsAll(t, "k", "B"), "every node grants the next owner")
}

// A new acquisition by the same token ends that settling: a late grant of
// the token is then the new acquisition's, and it is kept.
func TestRedlockLateGrantKeptByReacquisition(t *testing.T) {
	c, stall, r := lateGrant(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err, "reacquired by the same token, without waiting for the settling to end")
	stall.open()
	<-stall.ran
	time.Sleep(300 * time.Millisecond) // settling would have released it by now
	require.True(t, c.holdsAll(t, "k", "A"), "the token holds every node")
}
