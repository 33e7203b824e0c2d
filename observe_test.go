package dlm_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
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

// recorder is an Observer that records events as strings.
type recorder struct {
	mu     sync.Mutex
	events []string
	done   []dlm.LockDone
	causes []error
}

type ctxMark struct{}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) LockStart(ctx context.Context, key string, try bool) (context.Context, func(dlm.LockDone)) {
	r.add("start %s try=%v", key, try)
	ctx = context.WithValue(ctx, ctxMark{}, key)
	return ctx, func(d dlm.LockDone) {
		r.mu.Lock()
		r.done = append(r.done, d)
		r.mu.Unlock()
		r.add("done %s err=%v", key, d.Err != nil)
	}
}
func (r *recorder) Renewed(key string, err error) { r.add("renewed %s err=%v", key, err != nil) }
func (r *recorder) Lost(key string, cause error, held time.Duration) {
	r.mu.Lock()
	r.causes = append(r.causes, cause)
	r.mu.Unlock()
	r.add("lost %s", key)
}
func (r *recorder) Released(key string, held time.Duration, err error) {
	r.add("released %s err=%v", key, err != nil)
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// markStrategy is a Strategy wrapper that records whether Acquire's context
// carries the Observer's value.
type markStrategy struct {
	driver.Strategy
	mu     sync.Mutex
	marked []bool
}

func (s *markStrategy) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	s.mu.Lock()
	s.marked = append(s.marked, ctx.Value(ctxMark{}) == key)
	s.mu.Unlock()
	return s.Strategy.Acquire(ctx, key, token, ttl)
}

func TestObserverLockTryLockUnlock(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		rec := &recorder{}
		ms := &markStrategy{Strategy: newSingle(t, srv.Node())}
		m := newM(t, ms, dlm.WithObserver(rec), dlm.WithRetryDelay(time.Millisecond, 20*time.Millisecond))
		ctx := context.Background()

		l, err := m.Lock(ctx, "a")
		require.NoError(t, err)
		_, err = m.TryLock(ctx, "a")
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		const hold = 100 * time.Millisecond
		unlocked := make(chan error, 1)
		go func() { time.Sleep(hold); unlocked <- l.Unlock(ctx) }()
		l2, err := m.Lock(ctx, "a") // waits for the Unlock
		require.NoError(t, err)
		require.NoError(t, l2.Unlock(ctx))
		require.ErrorIs(t, l2.Unlock(ctx), dlm.ErrNotHeld) // a second Unlock is not reported

		require.NoError(t, <-unlocked)

		// The first lock's release is reported once its Unlock's round trip
		// is over; the waiter it woke may report its grant before or after.
		ev := rec.snapshot()
		first := slices.Index(ev, "released a err=false")
		assert.Contains(t, []int{5, 6}, first, "the first release reported while the waiter waited or as it was granted: %q", ev)
		if first >= 0 {
			ev = slices.Delete(ev, first, first+1)
		}
		assert.Equal(t, []string{
			"start a try=false", "done a err=false",
			"start a try=true", "done a err=true",
			"start a try=false", "done a err=false",
			"released a err=false",
		}, ev)
		require.Len(t, rec.done, 3)
		// In virtual time: no wait for a free lock, and the waiter waited
		// exactly until the Unlock woke it.
		assert.Equal(t, dlm.LockDone{Fence: 1, Attempts: 1, Waited: 0}, rec.done[0])
		assert.Equal(t, 1, rec.done[1].Attempts)
		assert.Zero(t, rec.done[1].Fence)
		assert.GreaterOrEqual(t, rec.done[2].Attempts, 2)
		assert.Equal(t, hold, rec.done[2].Waited)
		assert.Equal(t, l2.Fence(), rec.done[2].Fence)
		for i, marked := range ms.marked {
			assert.True(t, marked, "attempt %d ran with the Observer's context", i)
		}
	})
}

func TestObserverLostOnceWhateverEndsIt(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		rec := &recorder{}
		m := newVManager(t, srv, dlm.WithObserver(rec), dlm.WithTTL(600*time.Millisecond), dlm.WithAutoRenew(0.3, time.Minute))
		ctx := context.Background()

		// Renewal refused: the lock's key was deleted.
		l, err := m.Lock(ctx, "refused")
		require.NoError(t, err)
		require.EqualValues(t, 1, do(t, srv, "DEL", lockKey("refused")))
		<-l.Context().Done()
		_ = l.Extend(ctx, time.Second) // refused before reaching the servers: no renewal, no second loss
		_ = l.Unlock(ctx)              // nor a release
		assert.Equal(t, []string{"start refused try=false", "done refused err=false", "renewed refused err=true", "lost refused"}, rec.snapshot())
		require.Len(t, rec.causes, 1)
		assert.ErrorIs(t, rec.causes[0], dlm.ErrLost)
		assert.ErrorIs(t, rec.causes[0], dlm.ErrNotHeld)

		// Validity ran out, with nobody looking (no renewal, no Context).
		rec2 := &recorder{}
		m2 := newVManager(t, srv, dlm.WithObserver(rec2), dlm.WithTTL(150*time.Millisecond))
		l, err = m2.Lock(ctx, "expires")
		require.NoError(t, err)
		time.Sleep(time.Until(l.Until()) - time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, []string{"start expires try=false", "done expires err=false"}, rec2.snapshot(), "not lost before its validity")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, []string{"start expires try=false", "done expires err=false", "lost expires"}, rec2.snapshot(), "lost at its validity")
		_ = l.Unlock(ctx)
		assert.Len(t, rec2.snapshot(), 3, "Unlock of a lost lock is not reported")

		// Maximum hold time.
		rec3 := &recorder{}
		m3 := newVManager(t, srv, dlm.WithObserver(rec3), dlm.WithTTL(300*time.Millisecond), dlm.WithAutoRenew(0.3, 200*time.Millisecond))
		l, err = m3.Lock(ctx, "capped")
		require.NoError(t, err)
		<-l.Context().Done()
		assert.ErrorIs(t, context.Cause(l.Context()), dlm.ErrMaxHold)
		assert.ErrorIs(t, context.Cause(l.Context()), dlm.ErrLost)
		synctest.Wait()
		ev := rec3.snapshot()
		assert.Equal(t, "lost capped", ev[len(ev)-1])
		lost := 0
		for _, e := range ev {
			if e == "lost capped" {
				lost++
			}
		}
		assert.Equal(t, 1, lost)
		require.Len(t, rec3.causes, 1)
		assert.ErrorIs(t, rec3.causes[0], dlm.ErrMaxHold)
	})
}

func TestObserverExtend(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		rec := &recorder{}
		m := newVManager(t, srv, dlm.WithObserver(rec))
		ctx := context.Background()
		l, err := m.Lock(ctx, "x")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Unlock(ctx))
		assert.Equal(t, []string{"start x try=false", "done x err=false", "renewed x err=false", "released x err=false"}, rec.snapshot())
	})
}
