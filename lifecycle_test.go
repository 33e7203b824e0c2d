package dlm_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/strategy"
)

// countingNode counts the round trips made through a Node: single calls,
// and batches (Run with more than one script) with the scripts they carry;
// and the script calls of acquisitions (three keys) and of releases (one
// key, one argument). Its other methods are the wrapped Node's.
type countingNode struct {
	driver.Node
	calls, batches, batched atomic.Int64
	batchNs                 atomic.Int64 // longest batch
	acquires, releases      atomic.Int64
}

func isNumber(s string) bool { _, err := strconv.Atoi(s); return err == nil }

func (n *countingNode) Run(ctx context.Context, calls []driver.Call) {
	for _, c := range calls {
		switch {
		case len(c.Keys) >= 2: // the lock and its fence counter (and the quarantine marker)
			n.acquires.Add(1)
		case len(c.Keys) == 1 && (len(c.Args) == 1 || len(c.Args) == 2 && !isNumber(c.Args[1])):
			n.releases.Add(1) // a token and how to publish, where extend has a TTL
		}
	}
	if len(calls) == 1 {
		n.calls.Add(1)
		n.Node.Run(ctx, calls)
		return
	}
	n.batches.Add(1)
	n.batched.Add(int64(len(calls)))
	start := time.Now()
	defer func() {
		d := int64(time.Since(start))
		for old := n.batchNs.Load(); d > old && !n.batchNs.CompareAndSwap(old, d); old = n.batchNs.Load() {
		}
	}()
	n.Node.Run(ctx, calls)
}

// plainNode is a Node that cannot watch.
type plainNode struct{ driver.Node }

func (plainNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// countingStrategy counts Acquire calls and remembers when the last
// successful one was sent.
type countingStrategy struct {
	driver.Strategy
	acquires atomic.Int64
	probe    atomic.Pointer[func() error] // called as each request is sent and as its reply arrives

	mu         sync.Mutex
	lastWinner winner // the last successful request
}

// winner is what a countingStrategy saw of a successful request.
type winner struct {
	sent, replied     time.Time // when it was sent and its reply arrived
	probeSent, probed error     // what probe returned then
}

func (s *countingStrategy) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	s.acquires.Add(1)
	probe := func() error {
		if p := s.probe.Load(); p != nil {
			return (*p)()
		}
		return nil
	}
	var w winner
	w.probeSent, w.sent = probe(), time.Now()
	l, err := s.Strategy.Acquire(ctx, key, token, ttl)
	w.replied, w.probed = time.Now(), probe()
	if err == nil {
		s.mu.Lock()
		s.lastWinner = w
		s.mu.Unlock()
	}
	return l, err
}

// noWatchStrategy is a Strategy that cannot watch releases.
type noWatchStrategy struct{ driver.Strategy }

func (noWatchStrategy) WatchRelease(context.Context, string, func()) (func(), error) {
	return nil, errors.ErrUnsupported
}

func newSingle(t testing.TB, n driver.Node, opts ...strategy.Option) driver.Strategy {
	t.Helper()
	s, err := strategy.NewSingle(n, opts...)
	require.NoError(t, err)
	return s
}

func newM(t testing.TB, s driver.Strategy, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	m, err := dlm.New(s, opts...)
	require.NoError(t, err)
	return m
}

func ctxClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64,
		MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestContextDeadlineIsValidity(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 300 * time.Millisecond
		m := newVManager(t, srv, dlm.WithTTL(ttl))
		start := time.Now()
		l, err := m.TryLock(context.Background(), "validity")
		require.NoError(t, err)
		// The reply took no (virtual) time: the validity is the TTL less the
		// drift margin (1% and 2ms), counted from the request.
		assert.Equal(t, start.Add(ttl-ttl/100-2*time.Millisecond), l.Until())
		ctx := l.Context()
		d, ok := ctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, l.Until(), d)
		time.Sleep(time.Until(l.Until()) - time.Nanosecond)
		assert.NoError(t, ctx.Err(), "live until the validity")
		// Err checks the clock itself: at the validity it reports the end even
		// if the timer that closes Done has not run yet.
		time.Sleep(time.Nanosecond)
		require.Error(t, ctx.Err())
		assert.ErrorIs(t, context.Cause(ctx), dlm.ErrLost)
		assert.NotErrorIs(t, context.Cause(ctx), dlm.ErrUnlocked)
		<-ctx.Done()
		assert.Equal(t, l.Until(), time.Now(), "Done closed at the validity")
		// A child created afterwards is done at once.
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		<-child.Done()
		assert.ErrorIs(t, context.Cause(child), dlm.ErrLost)
	})
}

func TestAutoRenewKeepsLockPastSeveralTTLs(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 300 * time.Millisecond
		m := newVManager(t, srv, dlm.WithTTL(ttl), dlm.WithAutoRenew(1.0/3, time.Minute))
		ctx := context.Background()
		l, err := m.TryLock(ctx, "renewed")
		require.NoError(t, err)
		lctx := l.Context()
		first := l.Until()
		time.Sleep(5 * ttl)
		require.NoError(t, lctx.Err(), "context alive after 5 TTLs")
		assert.True(t, l.Until().After(first.Add(3*ttl)), "validity moved on")
		d, _ := lctx.Deadline()
		assert.True(t, d.After(time.Now()), "deadline is the current validity")
		_, err = m.TryLock(ctx, "renewed")
		assert.ErrorIs(t, err, dlm.ErrNotAcquired, "still held on the server")
		assert.Greater(t, pttl(t, srv, lockKey("renewed")), time.Duration(0))
		require.NoError(t, l.Unlock(ctx))
		<-lctx.Done()
		assert.ErrorIs(t, context.Cause(lctx), dlm.ErrUnlocked)
		assert.NotErrorIs(t, context.Cause(lctx), dlm.ErrLost)
	})
}

func TestRenewalRefusedEndsContextWithErrLost(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 2 * time.Second
		m := newVManager(t, srv, dlm.WithTTL(ttl), dlm.WithAutoRenew(0.1, time.Minute))
		ctx := context.Background()
		l, err := m.TryLock(ctx, "deleted")
		require.NoError(t, err)
		lctx := l.Context()
		do(t, srv, "DEL", lockKey("deleted")) // someone deletes the key
		deleted := time.Now()
		<-lctx.Done()
		// The first renewal, a tenth of the TTL after the grant, is refused.
		assert.Equal(t, ttl/10, time.Since(deleted), "ended by the first renewal")
		cause := context.Cause(lctx)
		assert.ErrorIs(t, cause, dlm.ErrLost)
		assert.ErrorIs(t, cause, dlm.ErrNotHeld, "the servers' refusal is the cause")
		assert.True(t, time.Now().Before(l.Until()), "ended by the renewal, before the validity ran out")
		assert.ErrorIs(t, l.Extend(ctx, ttl), dlm.ErrNotHeld)
	})
}

func TestRenewalFailingEndsContextAtValidity(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 300 * time.Millisecond
		node := srv.Node()
		s := newSingle(t, node, strategy.WithTimeout(50*time.Millisecond))
		m := newM(t, s, dlm.WithTTL(ttl), dlm.WithAutoRenew(1.0/3, time.Minute))
		l, err := m.TryLock(context.Background(), "failing")
		require.NoError(t, err)
		lctx := l.Context()
		node.Partition(true) // every renewal times out
		<-lctx.Done()
		cause := context.Cause(lctx)
		assert.ErrorIs(t, cause, dlm.ErrLost)
		assert.ErrorContains(t, cause, "extend on", "the last renewal's error is kept")
		assert.Equal(t, l.Until(), time.Now(), "ended exactly when the confirmed validity ran out")
	})
}

func TestMaxHoldStopsRenewal(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl, maxHold = 200 * time.Millisecond, 300 * time.Millisecond
		m := newVManager(t, srv, dlm.WithTTL(ttl), dlm.WithAutoRenew(0.25, maxHold))
		start := time.Now()
		l, err := m.TryLock(context.Background(), "capped")
		require.NoError(t, err)
		lctx := l.Context()
		<-lctx.Done()
		held := time.Since(start)
		assert.ErrorIs(t, context.Cause(lctx), dlm.ErrLost)
		assert.Contains(t, context.Cause(lctx).Error(), "maximum hold time")
		// Renewal stopped at the maximum hold; the last renewed lease runs out
		// within one TTL after it, and the context ends exactly then.
		assert.GreaterOrEqual(t, held, maxHold)
		assert.Less(t, held, maxHold+ttl)
		assert.Equal(t, l.Until(), time.Now(), "ended at the last renewed validity")
	})
}

// The maximum hold time is the one bound on holding a lock: explicit
// extensions are shortened to end at it and refused after it.
func TestMaxHoldBoundsExtend(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const maxHold = 400 * time.Millisecond
		// Renewal would come at 0.9 of the TTL: after the maximum hold.
		m := newVManager(t, srv, dlm.WithTTL(time.Second), dlm.WithAutoRenew(0.9, maxHold))
		ctx := context.Background()
		start := time.Now()
		short, err := m.TryLock(ctx, "extend-shortened")
		require.NoError(t, err)
		require.NoError(t, short.Extend(ctx, time.Minute))
		// The extension is shortened to a TTL that ends at the maximum hold;
		// the validity is that TTL less its drift margin.
		assert.Equal(t, start.Add(maxHold-maxHold/100-2*time.Millisecond), short.Until(), "the extension ends at the maximum hold")
		assert.Equal(t, maxHold, pttl(t, srv, lockKey("extend-shortened")), "the servers' TTL is shortened too")

		refused, err := m.TryLock(ctx, "extend-refused")
		require.NoError(t, err)
		time.Sleep(maxHold + 50*time.Millisecond)
		require.NoError(t, refused.Context().Err(), "the lease (1s) is still valid")
		err = refused.Extend(ctx, time.Minute)
		assert.ErrorIs(t, err, dlm.ErrNotHeld)
		require.Error(t, refused.Context().Err(), "refusal ends the context")
		assert.ErrorIs(t, context.Cause(refused.Context()), dlm.ErrLost)
		assert.Contains(t, context.Cause(refused.Context()).Error(), "maximum hold time")
	})
}

func TestAutoRenewBadOptions(t *testing.T) {
	s := newSingle(t, goredis.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})))
	for _, o := range []dlm.Option{
		dlm.WithAutoRenew(0, time.Minute), dlm.WithAutoRenew(1, time.Minute),
		dlm.WithAutoRenew(-0.5, time.Minute), dlm.WithAutoRenew(0.5, 0),
	} {
		_, err := dlm.New(s, o)
		assert.ErrorIs(t, err, dlm.ErrInvalid)
	}
}

// TestPartitionedHolderEndsBeforeOthersAcquire puts the holder behind a
// proxy that silently drops its traffic at a random point of its renewal
// cycle, and checks, in every trial, that the holder's context had ended
// by the time the other client was granted the lock: its validity (the
// context's deadline) lies before the winning reply arrived, and its Err,
// read then, was non-nil. The server grants the lock at some moment between
// the winning request's send and its reply; how often the holder's end came
// before the send already, and when a goroutine blocked on Done saw it,
// depend on the scheduler (a request can sit in the client for milliseconds
// on a loaded machine), so they are reported, not asserted.
func TestPartitionedHolderEndsBeforeOthersAcquire(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 400 * time.Millisecond
		holderNode := srv.Node()
		holderStrat := newSingle(t, holderNode, strategy.WithTimeout(100*time.Millisecond))
		holder := newM(t, holderStrat, dlm.WithTTL(ttl), dlm.WithAutoRenew(1.0/3, time.Minute))
		other := &countingStrategy{Strategy: newSingle(t, srv.Node())}
		others := newM(t, other, dlm.WithTTL(ttl), dlm.WithRetryDelay(time.Millisecond, 20*time.Millisecond))

		const trials = 10
		for i := range trials {
			holderNode.Partition(false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			key := "partitioned"
			l, err := holder.TryLock(ctx, key)
			require.NoError(t, err, "trial %d", i)
			lctx := l.Context()
			probe := func() error { return lctx.Err() }
			other.probe.Store(&probe)
			endCh := make(chan time.Time, 1)
			go func() { <-lctx.Done(); endCh <- time.Now() }()
			time.Sleep(rand.N(ttl)) // cut it at any point of the renewal cycle
			holderNode.Partition(true)
			cut := time.Now()
			won, err := others.Lock(ctx, key)
			require.NoError(t, err, "trial %d", i)
			other.mu.Lock()
			w := other.lastWinner
			other.mu.Unlock()
			ended := <-endCh
			deadline, _ := lctx.Deadline()
			t.Logf("trial %d: cut %v into the lease; holder validity ended %v after the cut, %v before the winning request was sent",
				i, cut.Sub(l.Until().Add(-ttl)), deadline.Sub(cut), w.sent.Sub(deadline))
			assert.ErrorIs(t, context.Cause(lctx), dlm.ErrLost, "trial %d", i)
			assert.True(t, deadline.Before(w.replied), "trial %d: holder valid until %v, other's winning reply at %v (overlap %v)",
				i, deadline, w.replied, deadline.Sub(w.replied))
			assert.ErrorIs(t, w.probed, context.Canceled, "trial %d: holder's ctx.Err() as the winning reply arrived", i)
			// In virtual time no scheduler delays the end: the holder's Context
			// had ended, and Done was closed, at its validity, before the
			// winning request was even sent.
			assert.True(t, deadline.Before(w.sent), "trial %d: validity ended before the winning request", i)
			assert.ErrorIs(t, w.probeSent, context.Canceled, "trial %d: holder's ctx.Err() as the winning request was sent", i)
			assert.Equal(t, deadline, ended, "trial %d: Done closed at the validity", i)
			assert.Greater(t, won.Fence(), l.Fence())
			other.probe.Store(nil)
			require.NoError(t, won.Unlock(context.Background()))
			cancel()
		}
	})
}

func TestWaiterWokenByRelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		notify bool
		wrap   func(driver.Strategy) driver.Strategy
	}{
		{"notified", true, nil},
		{"polling-node-cannot-notify", false, nil},
		{"polling-strategy-cannot-notify", false, func(s driver.Strategy) driver.Strategy { return noWatchStrategy{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
				var n driver.Node = srv.Node()
				if !tc.notify && tc.wrap == nil {
					n = plainNode{n}
				}
				strat := &countingStrategy{Strategy: newSingle(t, n)}
				var used driver.Strategy = strat
				if tc.wrap != nil {
					used = tc.wrap(strat)
				}
				maxPoll := 3 * time.Second
				if !tc.notify {
					maxPoll = 100 * time.Millisecond
				}
				m := newM(t, used, dlm.WithTTL(time.Minute), dlm.WithRetryDelay(5*time.Millisecond, maxPoll))
				ctx := context.Background()
				held, err := m.TryLock(ctx, "woken")
				require.NoError(t, err)
				got := make(chan time.Time, 1)
				go func() {
					l, err := m.Lock(ctx, "woken")
					if err == nil {
						got <- time.Now()
						_ = l.Unlock(ctx)
					}
					close(got)
				}()
				time.Sleep(300 * time.Millisecond) // virtual: the waiter polls a while, then parks
				synctest.Wait()
				before := strat.acquires.Load()
				released := time.Now()
				require.NoError(t, held.Unlock(ctx))
				at, ok := <-got
				require.True(t, ok, "waiter failed")
				if tc.notify {
					// Polling alone would take 1.5s or more here.
					assert.Equal(t, released, at, "woken by the release, at once")
					assert.Equal(t, int64(1), strat.acquires.Load()-before, "one attempt after the release")
				} else {
					assert.LessOrEqual(t, at.Sub(released), maxPoll, "found at the next poll")
				}
			})
		})
	}
}

func TestWaiterNotParkedWithoutNotification(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		strat := newSingle(t, srv.Node())
		ctx := context.Background()

		// Expiry publishes nothing: the waiter tries when the holder's TTL ends.
		const ttl = 300 * time.Millisecond
		m := newM(t, strat, dlm.WithTTL(ttl), dlm.WithRetryDelay(time.Millisecond, time.Minute))
		_, err := m.TryLock(ctx, "expires")
		require.NoError(t, err)
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := m.Lock(wctx, "expires")
		require.NoError(t, err)
		// The first waiter tries 1-2ms after the expiry the server reported
		// (in whole milliseconds).
		assert.GreaterOrEqual(t, time.Since(start), ttl, "not before the holder's TTL ended")
		assert.LessOrEqual(t, time.Since(start), ttl+3*time.Millisecond, "woken by the holder's TTL, not the one-minute poll")
		require.NoError(t, l.Unlock(ctx))

		// A deletion that publishes nothing (a lost notification): the poll bound.
		const maxPoll = 200 * time.Millisecond
		m = newM(t, strat, dlm.WithTTL(time.Minute), dlm.WithRetryDelay(time.Millisecond, maxPoll))
		_, err = m.TryLock(ctx, "deleted")
		require.NoError(t, err)
		time.AfterFunc(100*time.Millisecond, func() { _, _ = srv.Do("DEL", lockKey("deleted")) })
		start = time.Now()
		l, err = m.Lock(wctx, "deleted")
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "not before the deletion")
		assert.LessOrEqual(t, time.Since(start), 100*time.Millisecond+maxPoll, "within a poll of the deletion")
		require.NoError(t, l.Unlock(ctx))
	})
}

func TestWaitCancelled(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv, dlm.WithTTL(time.Minute))
		ctx := context.Background()
		held, err := m.TryLock(ctx, "cancelled")
		require.NoError(t, err)
		// Several queued waiters give up; a later one still gets the lock.
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := m.Lock(c, "cancelled")
				assert.ErrorIs(t, err, dlm.ErrNotAcquired)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, 100*time.Millisecond, time.Since(start), "gave up at its deadline")
			}()
		}
		wg.Wait()
		got := make(chan error, 1)
		go func() {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := m.Lock(c, "cancelled")
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		synctest.Wait() // the waiter is parked
		require.NoError(t, held.Unlock(ctx))
		unlocked := time.Now()
		require.NoError(t, <-got)
		assert.Equal(t, unlocked, time.Now(), "handed the lock at once")
	})
}

// TestRenewTenThousandLocks holds 10,000 locks on one node with
// auto-renewal and counts the round trips renewal makes per period.
func TestRenewTenThousandLocks(t *testing.T) {
	t.Parallel() // virtual time, CPU-bound: it overlaps with the other parallel tests
	if testing.Short() {
		t.Skip("10,000 locks")
	}
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const n, ttl, fraction = 10000, 3 * time.Second, 1.0 / 3
		period := time.Duration(float64(ttl) * fraction)
		node := &countingNode{Node: srv.Node()}
		m := newM(t, newSingle(t, node), dlm.WithTTL(ttl), dlm.WithAutoRenew(fraction, time.Hour))
		ctx := context.Background()
		locks := make([]*dlm.Lock, n)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 16 {
					l, err := m.TryLock(ctx, "many:"+strconv.Itoa(i))
					if err != nil {
						failed.Add(1)
						continue
					}
					locks[i] = l
				}
			}()
		}
		wg.Wait()
		require.Zero(t, failed.Load())
		// The locks were all granted at the same (virtual) instant: their
		// renewals fall on whole periods. Count between them.
		time.Sleep(period + period/2)
		calls0, batches0, batched0 := node.calls.Load(), node.batches.Load(), node.batched.Load()
		const periods = 3
		time.Sleep(periods * period)
		calls, batches, batched := node.calls.Load()-calls0, node.batches.Load()-batches0, node.batched.Load()-batched0
		t.Logf("%d locks, TTL %v, renewal period %v: %.1f pipelined round trips and %.1f single calls per period, %.0f extensions per period",
			n, ttl, period, float64(batches)/periods, float64(calls)/periods, float64(batched)/periods)
		assert.Zero(t, calls, "no per-lock round trips")
		// In virtual time no renewal is late: each lock once a period, in full
		// batches of one pipeline each.
		assert.Equal(t, int64(n*periods), batched, "every lock renewed once each period")
		assert.Equal(t, int64(periods*((n+dlm.RenewBatchForTest-1)/dlm.RenewBatchForTest)), batches, "locks renewed in full batches, one pipeline each")
		for i, l := range locks {
			if err := l.Context().Err(); err != nil {
				t.Fatalf("lock %d lost: %v", i, context.Cause(l.Context()))
			}
		}
		for _, l := range locks {
			_ = l.Unlock(ctx)
		}
	})
}

// inFlight counts concurrent Acquire calls and remembers the most seen.
type inFlight struct {
	driver.Strategy
	now, most atomic.Int64
}

func (s *inFlight) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	return s.Strategy.Acquire(ctx, key, token, ttl)
}

// Waiters of one Manager take turns: an Unlock hands the key to the first
// waiter at once, even when the strategy cannot notify, and they never race
// each other (with Redlock such races split the votes so that nobody wins).
func TestWaitersOfOneManagerTakeTurns(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		strat := &inFlight{Strategy: noWatchStrategy{newSingle(t, srv.Node())}}
		// Polling alone would wait at least a second between attempts.
		m := newM(t, strat, dlm.WithTTL(time.Minute), dlm.WithRetryDelay(2*time.Second, 4*time.Second))
		ctx := context.Background()
		held, err := m.TryLock(ctx, "turns")
		require.NoError(t, err)
		const waiters, work = 3, 10 * time.Millisecond
		done := make(chan error, waiters)
		for range waiters {
			go func() {
				l, err := m.Lock(ctx, "turns")
				if err == nil {
					time.Sleep(work) // virtual: work under the lock
					err = l.Unlock(ctx)
				}
				done <- err
			}()
		}
		synctest.Wait() // every waiter made its first attempt and parked
		strat.most.Store(0)
		start := time.Now()
		require.NoError(t, held.Unlock(ctx))
		for range waiters {
			require.NoError(t, <-done)
		}
		assert.Equal(t, waiters*work, time.Since(start), "each Unlock woke the next waiter at once")
		assert.Equal(t, int64(1), strat.most.Load(), "one attempt at a time after the waiters queued")
	})
}

// A waiter that never made an attempt of its own (the first waiter of its
// queue tries for all) still says why the lock was busy when it gives up:
// the queue's last refusal.
func TestWaiterGivesUpWithQueuesRefusal(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		holder := newVManager(t, srv, dlm.WithTTL(time.Minute))
		m := newVManager(t, srv, dlm.WithTTL(time.Minute))
		ctx := context.Background()
		_, err := holder.TryLock(ctx, "busy")
		require.NoError(t, err)
		const wait = 500 * time.Millisecond
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		errs := make(chan error, 3)
		for i := range 3 {
			go func() {
				_, err := m.Lock(wctx, "busy")
				errs <- err
			}()
			if i == 0 {
				synctest.Wait() // the queue exists: the others join it without trying
			}
		}
		for range 3 {
			err := <-errs
			assert.ErrorIs(t, err, dlm.ErrHeld)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		}
		assert.Equal(t, wait, time.Since(start), "all gave up at the deadline")
	})
}
