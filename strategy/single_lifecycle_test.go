package strategy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// lifecyclePlainNode hides every optional ability of a Node.
// lifecyclePlainNode is a node that cannot watch; its other methods are
// the wrapped node's.
type lifecyclePlainNode struct{ driver.Node }

func (lifecyclePlainNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

func TestSingleExtendMany(t *testing.T) {
	c := redistest.Start(t).Client(t)
	for _, tc := range []struct {
		name string
		node driver.Node
	}{{"pipelined", goredis.New(c)}, {"wrapped", lifecyclePlainNode{goredis.New(c)}}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := strategy.NewSingle(tc.node)
			require.NoError(t, err)
			ctx := context.Background()
			k := func(s string) string { return tc.name + ":" + s }
			for _, key := range []string{"a", "b"} {
				_, err := s.Acquire(ctx, k(key), "mine", time.Second)
				require.NoError(t, err)
			}
			_, err = s.Acquire(ctx, k("c"), "theirs", time.Second)
			require.NoError(t, err)
			start := time.Now()
			res := s.ExtendMany(ctx, []driver.HeldKey{
				{Key: k("a"), Token: "mine"}, {Key: k("b"), Token: "mine"},
				{Key: k("c"), Token: "mine"}, {Key: "", Token: "mine"}, {Key: k("gone"), Token: "mine"},
			}, 10*time.Second)
			end := time.Now()
			require.Len(t, res, 5)
			for _, i := range []int{0, 1} {
				require.NoError(t, res[i].Err)
				assert.Equal(t, uint64(1), res[i].Lease.Fence)
				// The validity counts from when the batch was sent: between start and end.
				valid := 10*time.Second - strategy.DriftMarginForTest(10*time.Second)
				assert.False(t, res[i].Lease.Until.Before(start.Add(valid)), "validity counted from before the batch was sent")
				assert.False(t, res[i].Lease.Until.After(end.Add(valid)), "validity no longer than the TTL less the drift")
				pttl, err := c.PTTL(ctx, "dlm:{"+k([]string{"a", "b"}[i])+"}").Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, 9*time.Second)
			}
			assert.ErrorIs(t, res[2].Err, dlm.ErrNotHeld)
			assert.ErrorIs(t, res[3].Err, dlm.ErrInvalid)
			assert.ErrorIs(t, res[4].Err, dlm.ErrNotHeld)
			pttl, err := c.PTTL(ctx, "dlm:{"+k("c")+"}").Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, pttl, time.Second, "another owner's lock untouched")
		})
	}
}

func TestSingleWatchRelease(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()

	plain, err := strategy.NewSingle(lifecyclePlainNode{goredis.New(c)})
	require.NoError(t, err)
	_, err = plain.WatchRelease(ctx, "k", func() {})
	assert.ErrorIs(t, err, errors.ErrUnsupported)

	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	_, err = s.WatchRelease(ctx, "", func() {})
	assert.ErrorIs(t, err, dlm.ErrInvalid)
	woken := make(chan struct{}, 10)
	stop, err := s.WatchRelease(ctx, "k", func() { woken <- struct{}{} })
	require.NoError(t, err)
	defer stop()
	_, err = s.Acquire(ctx, "k", "tok", time.Minute)
	require.NoError(t, err)
	_, err = s.Acquire(ctx, "k", "waiter", time.Minute)
	require.ErrorIs(t, err, dlm.ErrNotAcquired, "a waiter, for whom the release publishes")
	assert.ErrorIs(t, s.Release(ctx, "k", "other"), dlm.ErrNotHeld)
	require.NoError(t, s.Release(ctx, "k", "tok"))
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification after the release")
	}
	time.Sleep(50 * time.Millisecond)
	assert.Empty(t, woken, "one notification per release; none for a refused one")
}

// A grant whose reply arrives after the lease's validity ended is refused
// and given back, never handed out.
func TestSingleLateGrantRefused(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	// Validity is TTL - 0.49*TTL - 2ms ≈ 1.02s of a 2s TTL: a reply 1.2s
	// late comes after the validity but while the key still lives.
	s, err := strategy.NewSingle(goredis.New(c), strategy.WithDriftFactor(0.49))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.Acquire(ctx, "late", "warm", time.Second) // dial and load scripts at full speed
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "late", "warm"))

	p.SetDelay(1200 * time.Millisecond)
	// The grant's reply is already held back when the delay is lifted, so
	// the release that follows is answered at once.
	time.AfterFunc(300*time.Millisecond, func() { p.SetDelay(0) })
	_, err = s.Acquire(ctx, "late", "mine", 2*time.Second)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.Contains(t, err.Error(), "past the lease's validity")
	n, err := srv.Client(t).Exists(ctx, "dlm:{late}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the late grant was released before its TTL ran out")
}

// A client of one server that is a node of a Cluster (a *redis.Client, not
// a ClusterClient) watches releases on ordinary channels, so its releases
// are published there: the waiter is woken at once, not after the
// holder's TTL.
func TestReleaseNotifiesOneServerClientOnClusterNode(t *testing.T) {
	srv := redistest.StartCluster(t, 1)[0]
	manager := func() *dlm.Manager { // one per process: a Manager hands off within itself
		s, err := strategy.NewSingle(goredis.New(ctxClient(t, srv.Addr)))
		require.NoError(t, err)
		// Retries 2s apart: a waiter that is not notified takes that long.
		m, err := dlm.New(s, dlm.WithTTL(10*time.Second), dlm.WithRetryDelay(2*time.Second, 2*time.Second))
		require.NoError(t, err)
		return m
	}
	holder, waiter := manager(), manager()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := holder.TryLock(ctx, "k")
	require.NoError(t, err)
	got := make(chan time.Time, 1)
	go func() {
		if l, err := waiter.Lock(ctx, "k"); err == nil {
			got <- time.Now()
			_ = l.Unlock(context.Background())
		}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is watching, and has been refused
	released := time.Now()
	require.NoError(t, held.Unlock(ctx))
	select {
	case at := <-got:
		t.Logf("the waiter got the lock %v after the release", at.Sub(released))
		assert.Less(t, at.Sub(released), time.Second, "woken by the release")
	case <-ctx.Done():
		t.Fatal("the waiter was not woken by the release")
	}
}
