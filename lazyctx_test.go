package dlm_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
)

// grantAll is a Strategy that grants every lock at once, in memory: the
// Manager's own cost is then all there is to count.
type grantAll struct{ fence uint64 }

func (s *grantAll) Acquire(_ context.Context, _, _ string, ttl time.Duration) (driver.Lease, error) {
	s.fence++
	return driver.Lease{Fence: s.fence, Until: time.Now().Add(ttl)}, nil
}

func (s *grantAll) Extend(_ context.Context, _, _ string, ttl time.Duration) (driver.Lease, error) {
	return driver.Lease{Fence: s.fence, Until: time.Now().Add(ttl)}, nil
}

func (s *grantAll) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(locks))
	for i := range out {
		out[i].Lease, out[i].Err = s.Extend(ctx, "", "", ttl)
	}
	return out
}

func (s *grantAll) Release(context.Context, string, string) error { return nil }

func (s *grantAll) WatchRelease(context.Context, string, func()) (func(), error) {
	return nil, errors.ErrUnsupported
}

// The plain TryLock and Unlock make two allocations in the Manager (the
// token and the Lock) and no Context, timer or goroutine; asking for the
// Context is what makes them.
func TestPlainLockMakesNoContext(t *testing.T) {
	m := newM(t, &grantAll{}, dlm.WithTTL(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pair := func(asks bool) func() {
		return func() {
			l, err := m.TryLock(ctx, "k")
			if err != nil {
				panic(err)
			}
			if ContextMade(l) {
				panic("a Context was made unasked")
			}
			if asks {
				_ = l.Context()
			}
			if err := l.Unlock(ctx); err != nil {
				panic(err)
			}
		}
	}
	plain := testing.AllocsPerRun(100, pair(false))
	asked := testing.AllocsPerRun(100, pair(true))
	t.Logf("allocations per pair: plain %v, with Context %v", plain, asked)
	if !raceOn {
		assert.LessOrEqual(t, plain, 2.0, "allocations per plain pair")
	}
	assert.GreaterOrEqual(t, asked-plain, 3.0, "allocations the Context, its cancellation and its timer take (plain %v, asked %v)", plain, asked)
}

// ContextMade is dlm.ContextMadeForTest.
var ContextMade = dlm.ContextMadeForTest

// A Context asked for after renewals (auto-renewal, then Extend) reports
// the validity last confirmed as its deadline, and ends no later than it
// once renewals stop; before it was asked for, the Lock had made none. One
// asked for after the validity ran out is ended already, with ErrLost; one
// asked for and then unlocked ends with ErrUnlocked.
func TestLateContextFollowsRenewals(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 3 * time.Second
		m := newVManager(t, srv, dlm.WithTTL(ttl), dlm.WithAutoRenew(1.0/3, 10*time.Second))
		ctx := context.Background()
		l, err := m.TryLock(ctx, "late")
		require.NoError(t, err)
		start := time.Now()
		time.Sleep(5 * time.Second) // five renewals
		// The fifth is due at this very instant: let it finish, so that
		// the Deadline and Until read below see the same lease.
		synctest.Wait()
		assert.False(t, ContextMade(l), "renewals made a Context")
		lctx := l.Context()
		dl, ok := lctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, l.Until(), dl)
		assert.True(t, dl.After(start.Add(ttl)), "the deadline %v is the first lease's, not the renewed one", dl.Sub(start))
		require.NoError(t, lctx.Err())

		// Renewals stop at the maximum hold time (10s): the context ends
		// at the validity last confirmed, not later.
		<-lctx.Done()
		until := l.Until()
		assert.False(t, time.Now().After(until), "ended %v after the validity", time.Since(until))
		assert.ErrorIs(t, context.Cause(lctx), dlm.ErrLost)
		assert.ErrorIs(t, context.Cause(lctx), dlm.ErrMaxHold)

		// Asked for only after the validity ran out: already ended.
		plain := newVManager(t, srv, dlm.WithTTL(ttl))
		l2, err := plain.TryLock(ctx, "late2")
		require.NoError(t, err)
		require.NoError(t, l2.Extend(ctx, 2*ttl))
		time.Sleep(ttl + time.Second) // past the first lease, within the extension
		assert.False(t, ContextMade(l2))
		c2 := l2.Context()
		dl2, _ := c2.Deadline()
		assert.Equal(t, l2.Until(), dl2)
		require.NoError(t, c2.Err(), "the extension holds")
		<-c2.Done()
		assert.False(t, time.Now().After(l2.Until()))
		assert.ErrorIs(t, context.Cause(c2), dlm.ErrLost)

		l3, err := plain.TryLock(ctx, "late3")
		require.NoError(t, err)
		time.Sleep(ttl)
		c3 := l3.Context()
		assert.ErrorIs(t, c3.Err(), context.Canceled)
		assert.ErrorIs(t, context.Cause(c3), dlm.ErrLost)

		l4, err := plain.TryLock(ctx, "late4")
		require.NoError(t, err)
		c4 := l4.Context()
		require.NoError(t, l4.Unlock(ctx))
		<-c4.Done()
		assert.ErrorIs(t, context.Cause(c4), dlm.ErrUnlocked)
	})
}
