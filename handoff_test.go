package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/mgr"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/internal/vtest"
)

// handoffCounting counts the calls a Manager makes to a Handoff strategy;
// a Handoff call waits for gate when it is set.
type handoffCounting struct {
	driver.Strategy
	acquires, releases, handoffs atomic.Int64
	gate                         chan struct{}
}

func (s *handoffCounting) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	s.acquires.Add(1)
	return s.Strategy.Acquire(ctx, key, token, ttl)
}

func (s *handoffCounting) Release(ctx context.Context, key, token string) error {
	s.releases.Add(1)
	return s.Strategy.Release(ctx, key, token)
}

func (s *handoffCounting) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	if s.gate != nil {
		<-s.gate
	}
	s.handoffs.Add(1)
	return s.Strategy.(driver.Handoff).Handoff(ctx, key, from, to, ttl)
}

// waitFor runs Lock on key in a goroutine and returns what it returns.
func waitFor(ctx context.Context, m *dlm.Manager, key string) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx, key)
		ch <- lockResult{l, err, time.Now()}
	}()
	return ch
}

type lockResult struct {
	l   *dlm.Lock
	err error
	at  time.Time
}

// A parked case: a server, a Manager over a counted Handoff strategy, a
// holder of key, and a Lock call of the same Manager waiting for key.
type parked struct {
	srv  *dlmtest.Server
	s    *handoffCounting
	m    *dlm.Manager
	held *dlm.Lock
	got  <-chan lockResult
}

// park sets up a parked case over srv, inside a synctest bubble; the waiter's Lock runs with wctx, and the
// strategy's Handoff calls wait for gate when it is not nil.
func park(t *testing.T, srv *dlmtest.Server, wctx context.Context, key string, gate chan struct{}) *parked {
	t.Helper()
	s := &handoffCounting{Strategy: newSingle(t, srv.Node()), gate: gate}
	m := newM(t, s, dlm.WithTTL(time.Minute), dlm.WithRetryDelay(5*time.Millisecond, 5*time.Second))
	held, err := m.TryLock(context.Background(), key)
	require.NoError(t, err)
	return &parked{srv, s, m, held, vparkWaiter(t, wctx, s, m, key)}
}

// parkWaiter starts a Lock call of m on key, which another call of m
// holds, and returns once it waits: it has made its two attempts (one
// before it queued, one once its subscription was set up) and was refused.
// It runs in real time (for the tests over real servers); vparkWaiter is
// its synctest twin.
func parkWaiter(t *testing.T, wctx context.Context, s *handoffCounting, m *dlm.Manager, key string) <-chan lockResult {
	t.Helper()
	before := s.acquires.Load()
	got := waitFor(wctx, m, key)
	require.Eventually(t, func() bool { return s.acquires.Load() >= before+2 && dlm.ParkedForTest(m, key) }, 10*time.Second, time.Millisecond,
		"the waiter's two attempts, the second refusal taken in")
	return got
}

// vparkWaiter is parkWaiter in a synctest bubble: it returns once the
// waiter is parked, having made exactly its two attempts.
func vparkWaiter(t *testing.T, wctx context.Context, s *handoffCounting, m *dlm.Manager, key string) <-chan lockResult {
	t.Helper()
	before := s.acquires.Load()
	got := waitFor(wctx, m, key)
	synctest.Wait()
	require.Equal(t, before+2, s.acquires.Load(), "the waiter's two attempts")
	return got
}

// An Unlock while a Lock call of the same Manager waits passes the lock to
// it: one Handoff call, no release and no new attempt, and the server
// holds the waiter's token with the next fence.
func TestUnlockHandsOffToWaiter(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		p := park(t, srv, ctx, "h", nil)
		s, held, got := p.s, p.held, p.got
		acquires := s.acquires.Load()
		unlocked := time.Now()
		require.NoError(t, held.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err)
		assert.Equal(t, unlocked, r.at, "handed over at once")
		assert.Equal(t, int64(1), s.handoffs.Load(), "Handoff calls")
		assert.Equal(t, int64(0), s.releases.Load(), "Release calls")
		assert.Equal(t, acquires, s.acquires.Load(), "Acquire calls after the Unlock")
		assert.Equal(t, held.Fence()+1, r.l.Fence())
		lock := lockKey("h")
		// The waiter's refusal marked the lock (a leading 0: its release
		// publishes), and the hand-off kept the mark.
		assert.Equal(t, "0"+mgr.LockValue(r.l.Fence(), r.l.Token()), do(t, srv, "GET", lock))
		assert.ErrorIs(t, held.Unlock(ctx), dlm.ErrNotHeld, "second Unlock of the handed-off lock")
		require.NoError(t, r.l.Extend(ctx, time.Minute))
		require.NoError(t, r.l.Unlock(ctx))
		assert.Equal(t, int64(0), do(t, srv, "EXISTS", lock), "the waiter's Unlock, with no one waiting, released the lock")
	})
}

// A waiter that gives up while the lock is being handed to it does not
// keep it: the Manager releases it long before its TTL.
func TestHandoffToWaiterThatGaveUp(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		wctx, cancel := context.WithCancel(ctx)
		p := park(t, srv, wctx, "gave-up", make(chan struct{}))
		s, held, got := p.s, p.held, p.got
		unlocked := make(chan error, 1)
		go func() { unlocked <- held.Unlock(ctx) }()
		synctest.Wait() // the Unlock waits at the gate
		cancel()
		r := <-got
		require.ErrorIs(t, r.err, dlm.ErrNotAcquired)
		close(s.gate)
		require.NoError(t, <-unlocked)
		assert.Equal(t, int64(1), s.handoffs.Load())
		// The Manager gives the handed lock back at once: no virtual time passes.
		released := time.Now()
		synctest.Wait()
		other := newVManager(t, srv, dlm.WithTTL(time.Minute))
		l, err := other.TryLock(ctx, "gave-up")
		require.NoError(t, err, "the lock handed to a waiter that gave up was released")
		assert.Equal(t, released, time.Now())
		require.NoError(t, l.Unlock(ctx))
	})
}

// When the holder's lock is gone (expired, or deleted here), the hand-off
// is refused: Unlock says the lock was not held, and the waiter is woken
// at once to try, rather than at its next poll.
func TestHandoffRefusedWakesWaiter(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		p := park(t, srv, ctx, "gone", nil)
		s, held, got := p.s, p.held, p.got
		require.Equal(t, int64(1), do(t, srv, "DEL", lockKey("gone"))) // publishes nothing
		start := time.Now()
		assert.ErrorIs(t, held.Unlock(ctx), dlm.ErrNotHeld)
		r := <-got
		require.NoError(t, r.err)
		assert.Equal(t, start, r.at, "woken by the Unlock at once, not the 5s poll")
		assert.Equal(t, int64(1), s.handoffs.Load())
		assert.Greater(t, r.l.Fence(), held.Fence())
		require.NoError(t, r.l.Unlock(ctx))
	})
}

// Hand-offs between one Manager's goroutines do not shut out another
// process (another Manager): a run of hand-offs ends with a release within
// the maximum retry delay.
func TestHandoffsLetOtherProcessesIn(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		s := &handoffCounting{Strategy: newSingle(t, srv.Node())}
		opts := []dlm.Option{dlm.WithTTL(10 * time.Second), dlm.WithRetryDelay(time.Millisecond, 50*time.Millisecond)}
		busy := newM(t, s, opts...)
		other := newVManager(t, srv, opts...)
		ctx := context.Background()
		const churn = 3 * time.Second
		stop := time.Now().Add(churn)
		done := make(chan error, 2)
		for range 2 {
			go func() {
				for time.Now().Before(stop) {
					l, err := busy.Lock(ctx, "busy")
					if err != nil {
						done <- err
						return
					}
					time.Sleep(5 * time.Millisecond) // virtual: work under the lock
					if err := l.Unlock(ctx); err != nil {
						done <- err
						return
					}
					// Other work: the waiter handed the lock has left the
					// queue before this goroutine waits again.
					time.Sleep(time.Millisecond)
				}
				done <- nil
			}()
		}
		time.Sleep(100 * time.Millisecond) // virtual: the churn is under way
		wctx, cancel := context.WithDeadline(ctx, stop)
		defer cancel()
		start := time.Now()
		l, err := other.Lock(wctx, "busy")
		require.NoError(t, err, "the other Manager got the lock while the busy one kept handing it off")
		t.Logf("the other Manager waited %v", time.Since(start))
		require.NoError(t, l.Unlock(ctx))
		for range 2 {
			require.NoError(t, <-done)
		}
		assert.Positive(t, s.handoffs.Load(), "hand-offs in the busy Manager")
	})
}

// A hand-off whose reply is lost (applied, unseen) leaves nothing stuck:
// the strategy gives the new token's lock back, Unlock reports the failure,
// and the waiter gets the lock well before the TTL.
func TestHandoffReplyLost(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		node := conformance.Wrap(srv.Node())
		s := &handoffCounting{Strategy: newSingle(t, node)}
		m := newM(t, s, dlm.WithTTL(time.Minute), dlm.WithRetryDelay(5*time.Millisecond, 200*time.Millisecond))
		ctx := context.Background()
		held, err := m.TryLock(ctx, "lost")
		require.NoError(t, err)
		got := vparkWaiter(t, ctx, s, m, "lost")

		node.Set(conformance.Fault{LoseReply: true})
		err = held.Unlock(ctx)
		node.Heal()
		unlocked := time.Now()
		require.Error(t, err, "Unlock saw no reply")
		assert.ErrorIs(t, err, conformance.ErrReplyLost)
		assert.Equal(t, int64(1), s.handoffs.Load())
		r := <-got
		require.NoError(t, r.err)
		t.Logf("granted %v after the lost hand-off", r.at.Sub(unlocked))
		assert.Less(t, r.at.Sub(unlocked), time.Second, "well before the TTL")
		assert.Greater(t, r.l.Fence(), held.Fence()+1, "the lost hand-off's fence was used")
		require.NoError(t, r.l.Unlock(ctx))
		assert.Equal(t, int64(0), do(t, srv, "EXISTS", lockKey("lost")))
	})
}

// Processes (Managers) whose goroutines hand the lock to each other still
// share it: each run of hand-offs ends with a release that another process
// can win, so that every Manager holds the key a fair part of the time.
// It stays on a real server: under synctest over dlmtest one Manager
// takes about 95% of the grants and the others' Lock calls time out
// (whatever the round-trip time), so the share seen here rests on timing
// noise; see the report of branch vtime. A Lock that waits a second
// without a grant tries again (a loaded machine can stretch a wait that
// long): what is asserted is each Manager's share.
func TestHandoffsShareAmongProcesses(t *testing.T) {
	c := redistest.Start(t).Client(t)
	opts := []dlm.Option{dlm.WithTTL(10 * time.Second), dlm.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)}
	const managers, workers = 4, 2
	var grants, timeouts [managers]atomic.Int64
	ctx := context.Background()
	stop := time.Now().Add(3 * time.Second)
	done := make(chan error, managers*workers)
	for i := range managers {
		m := newM(t, newSingle(t, goredis.New(c)), opts...)
		for range workers {
			go func() {
				for time.Now().Before(stop) {
					lctx, cancel := context.WithTimeout(ctx, time.Second)
					l, err := m.Lock(lctx, "shared")
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						timeouts[i].Add(1)
						continue
					}
					if err != nil {
						done <- fmt.Errorf("manager %d: %w", i, err)
						return
					}
					grants[i].Add(1)
					time.Sleep(2 * time.Millisecond)
					if err := l.Unlock(ctx); err != nil {
						done <- err
						return
					}
					time.Sleep(500 * time.Microsecond) // other work
				}
				done <- nil
			}()
		}
	}
	for range managers * workers {
		assert.NoError(t, <-done)
	}
	var all int64
	for i := range grants {
		all += grants[i].Load()
	}
	for i := range grants {
		t.Logf("manager %d: %d of %d grants, %d waits of a second without one", i, grants[i].Load(), all, timeouts[i].Load())
		assert.Greater(t, grants[i].Load(), all/(4*managers), "manager %d's share", i)
	}
}

// What a Manager remembers of ended queues (contention, the last fence) is
// dropped once older than the contention memory (a second), so that a
// Manager waiting on ever new keys keeps at most about twice the keys of
// the last second.
func TestQueueMemoryIsBounded(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv)
		for i := range 1000 {
			require.Equal(t, i+1, dlm.RememberForTest(m, "old"+strconv.Itoa(i), 1), "all remembered within the second")
		}
		dlm.AgeMemoryForTest(m, 2*time.Second)
		n := 0
		for i := range 1100 {
			n = dlm.RememberForTest(m, "new"+strconv.Itoa(i), 1)
		}
		assert.LessOrEqual(t, n, 1100, "the memories older than a second were dropped")
	})
}
