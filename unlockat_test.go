package dlm_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/strategy"
)

// UnlockAt ends the Lock at once but leaves its key to expire at at: the
// servers' TTL becomes the time left, no renewal lengthens it, another
// process is refused until at and gets the key then, and a later Unlock
// deletes nothing.
func TestUnlockAtLeavesKeyUntilAt(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		m := vtest.Manager(t, srv.Node(), dlm.WithAutoRenew(0.1, time.Hour)) // renews every second
		other := vtest.Manager(t, srv.Node())
		l, err := m.TryLock(ctx, "daily")
		require.NoError(t, err)
		lctx := l.Context()
		const hold = 3 * time.Second
		at := time.Now().Add(hold)
		require.NoError(t, l.UnlockAt(ctx, at))
		require.Error(t, lctx.Err(), "the Lock's context ends at once")
		assert.ErrorIs(t, context.Cause(lctx), dlm.ErrUnlocked)
		lock := lockKey("daily")
		assert.Equal(t, hold, pttl(t, srv, lock), "the key's TTL is the time left until at")

		_, err = other.TryLock(ctx, "daily")
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		left, ok := dlm.RetryAfter(err)
		assert.True(t, ok && left <= hold, "RetryAfter %v (%v), want at most %v", left, ok, hold)
		assert.ErrorIs(t, l.Unlock(ctx), dlm.ErrNotHeld, "Unlock after UnlockAt")
		assert.Equal(t, int64(1), do(t, srv, "EXISTS", lock), "Unlock after UnlockAt deleted the key")

		time.Sleep(hold - time.Millisecond) // past three renewal periods
		assert.Equal(t, time.Millisecond, pttl(t, srv, lock), "no renewal lengthened the TTL")
		_, err = other.TryLock(ctx, "daily")
		require.ErrorIs(t, err, dlm.ErrNotAcquired, "1ms before at")
		time.Sleep(time.Millisecond)
		l2, err := other.TryLock(ctx, "daily")
		require.NoError(t, err, "at at")
		assert.Greater(t, l2.Fence(), l.Fence())
		require.NoError(t, l2.Unlock(ctx))
	})
}

// A Lock call of the same Manager waiting for the key is not handed it by
// UnlockAt: it gets the key when it expires, at at, woken then rather than
// at its next poll.
func TestUnlockAtNoHandoffBeforeAt(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		p := park(t, srv, ctx, "h", nil) // the waiter polls every 5s at most
		at := time.Now().Add(2 * time.Second)
		require.NoError(t, p.held.UnlockAt(ctx, at))
		assert.Equal(t, int64(1), do(t, srv, "EXISTS", lockKey("h")))
		r := <-p.got
		require.NoError(t, r.err)
		assert.False(t, r.at.Before(at), "the waiter got the key at %v, before at %v", r.at, at)
		assert.Less(t, r.at.Sub(at), time.Second, "woken at at, not at its 5s poll")
		assert.Equal(t, int64(0), p.s.handoffs.Load(), "Handoff calls")
		assert.Equal(t, int64(0), p.s.releases.Load(), "Release calls")
		assert.Greater(t, r.l.Fence(), p.held.Fence())
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// An at that has passed makes UnlockAt an Unlock: the key is deleted, or
// handed to a waiting Lock call of the same Manager.
func TestUnlockAtPastIsUnlock(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		m := vtest.Manager(t, srv.Node())
		l, err := m.TryLock(ctx, "past")
		require.NoError(t, err)
		require.NoError(t, l.UnlockAt(ctx, time.Now().Add(-time.Second)))
		assert.Equal(t, int64(0), do(t, srv, "EXISTS", lockKey("past")))
		assert.ErrorIs(t, context.Cause(l.Context()), dlm.ErrUnlocked)

		p := park(t, srv, ctx, "past2", nil)
		require.NoError(t, p.held.UnlockAt(ctx, time.Now()))
		r := <-p.got
		require.NoError(t, r.err)
		assert.Equal(t, int64(1), p.s.handoffs.Load(), "handed off as by Unlock")
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// With a maximum hold time, the key is kept at most until the lock has
// been held that long, as Extend is bounded; an at more than MaxTTL away
// is refused and changes nothing.
func TestUnlockAtBounds(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		plain := vtest.Manager(t, srv.Node())
		l, err := plain.TryLock(ctx, "far")
		require.NoError(t, err)
		err = l.UnlockAt(ctx, time.Now().Add(dlm.MaxTTL+time.Second))
		require.ErrorIs(t, err, dlm.ErrInvalid)
		require.NoError(t, l.Context().Err(), "a refused UnlockAt changes nothing")
		require.NoError(t, l.Unlock(ctx))

		m := vtest.Manager(t, srv.Node(), dlm.WithAutoRenew(0.3, time.Minute))
		l, err = m.TryLock(ctx, "bounded")
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		require.NoError(t, l.UnlockAt(ctx, time.Now().Add(time.Hour)))
		assert.Equal(t, 50*time.Second, pttl(t, srv, lockKey("bounded")), "kept until the maximum hold time")
	})
}

// A time too close for the strategy to take as a TTL (below the drift
// margin) is not a reason to free the key early: UnlockAt waits until at,
// then releases it.
func TestUnlockAtTooShort(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		m := vtest.Manager(t, srv.Node())
		l, err := m.TryLock(ctx, "short")
		require.NoError(t, err)
		at := time.Now().Add(2 * time.Millisecond) // the margin is 2ms plus 1%
		done := make(chan error, 1)
		go func() { done <- l.UnlockAt(ctx, at) }()
		synctest.Wait()
		require.ErrorIs(t, context.Cause(l.Context()), dlm.ErrUnlocked, "the context ends at once")
		assert.Equal(t, int64(1), do(t, srv, "EXISTS", lockKey("short")), "freed before at")
		require.NoError(t, <-done)
		assert.False(t, time.Now().Before(at))
		assert.Equal(t, int64(0), do(t, srv, "EXISTS", lockKey("short")), "released at at")
	})
}

// gatedRenewals holds the renewals (ExtendMany) of a strategy at a gate
// once closed is set.
type gatedRenewals struct {
	driver.Strategy
	hold atomic.Bool
	gate chan struct{}
}

func (s *gatedRenewals) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	if s.hold.Load() {
		<-s.gate
	}
	return s.Strategy.ExtendMany(ctx, locks, ttl)
}

// A renewal under way when UnlockAt is called is waited for, so that it
// cannot reset the key's TTL after UnlockAt set it.
func TestUnlockAtWaitsForRenewal(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		single, err := strategy.NewSingle(srv.Node())
		require.NoError(t, err)
		s := &gatedRenewals{Strategy: single, gate: make(chan struct{})}
		m := vtest.Over(t, s, dlm.WithAutoRenew(0.5, time.Hour)) // renews after 5s
		l, err := m.TryLock(ctx, "renewing")
		require.NoError(t, err)
		s.hold.Store(true)
		time.Sleep(5 * time.Second)
		synctest.Wait() // the renewal waits at the gate
		done := make(chan error, 1)
		go func() { done <- l.UnlockAt(ctx, time.Now().Add(time.Second)) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("UnlockAt returned (%v) while a renewal was under way", err)
		default:
		}
		close(s.gate)
		require.NoError(t, <-done)
		assert.Equal(t, time.Second, pttl(t, srv, lockKey("renewing")), "the renewal reset the TTL after UnlockAt")
	})
}
