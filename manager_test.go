package dlm_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/strategy"
)

func TestMutualExclusion32Goroutines(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv, dlm.WithTTL(5*time.Second), dlm.WithRetryDelay(time.Millisecond, 10*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const workers, rounds = 32, 20
		res := redistest.Contend(t, workers, rounds, 50*time.Microsecond, func() (uint64, func() error, error) {
			l, err := m.Lock(ctx, "counter")
			if err != nil {
				return 0, nil, err
			}
			return l.Fence(), func() error { return l.Unlock(context.Background()) }, nil
		})
		assert.Equal(t, int32(1), res.MaxHolders, "most holders at once")
		assert.Equal(t, workers*rounds, res.Counter, "shared counter")
		for i := 1; i < len(res.Fences); i++ {
			assert.Greater(t, res.Fences[i], res.Fences[i-1], "fence %d did not increase", i)
		}
		assert.Equal(t, []uint64{1, workers * rounds}, []uint64{res.Fences[0], res.Fences[len(res.Fences)-1]}, "first and last fence")
	})
}

func TestLockExpiresAndPassesOn(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		const ttl = 200 * time.Millisecond
		m := newVManager(t, srv, dlm.WithTTL(ttl))
		ctx := context.Background()
		start := time.Now()
		first, err := m.TryLock(ctx, "expiring")
		require.NoError(t, err)

		_, err = m.TryLock(ctx, "expiring")
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		require.ErrorIs(t, err, dlm.ErrHeld)
		rem, ok := dlm.RetryAfter(err)
		require.True(t, ok, "the holder's TTL is known")
		assert.Equal(t, ttl, rem, "no time has passed")

		// Never unlocked: Lock waits for the TTL to run out, no longer (the
		// first waiter tries 1-2ms after the expiry the server reported, in
		// whole milliseconds).
		second, err := m.Lock(ctx, "expiring")
		require.NoError(t, err)
		granted := time.Now()
		assert.GreaterOrEqual(t, granted.Sub(start), ttl)
		assert.LessOrEqual(t, granted.Sub(start), ttl+3*time.Millisecond)
		assert.Greater(t, second.Fence(), first.Fence())

		// The first holder's lease is gone: its context ended (before the
		// second was granted) and it can neither extend nor release.
		<-first.Context().Done()
		assert.True(t, first.Until().Before(granted), "first valid until %v, second granted at %v", first.Until(), granted)
		assert.ErrorIs(t, context.Cause(first.Context()), dlm.ErrLost)
		assert.ErrorIs(t, first.Extend(ctx, time.Second), dlm.ErrNotHeld)
		assert.ErrorIs(t, first.Unlock(ctx), dlm.ErrNotHeld)
		require.NoError(t, second.Unlock(ctx))
	})
}

func TestOnlyOwnerExtendsAndReleases(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv, dlm.WithTTL(time.Second))
		ctx := context.Background()
		l, err := m.TryLock(ctx, "owned")
		require.NoError(t, err)
		assert.Equal(t, "owned", l.Key())
		h, ok := inspect.HolderOf(l.Token())
		assert.True(t, ok, "the token carries its holder")
		assert.Equal(t, time.Second, h.TTL)

		// Another token can neither extend nor release it.
		s, err := strategy.NewSingle(srv.Node())
		require.NoError(t, err)
		_, err = s.Extend(ctx, "owned", "intruder", time.Minute)
		assert.ErrorIs(t, err, dlm.ErrNotHeld)
		assert.ErrorIs(t, s.Release(ctx, "owned", "intruder"), dlm.ErrNotHeld)
		// A token that shares a prefix with the owner's is still another token.
		assert.ErrorIs(t, s.Release(ctx, "owned", l.Token()[:39]), dlm.ErrNotHeld)

		time.Sleep(10 * time.Millisecond) // virtual
		require.NoError(t, l.Extend(ctx, 5*time.Second))
		// The new validity: 5s less the drift margin (1% and 2ms), from now.
		assert.Equal(t, time.Now().Add(5*time.Second-52*time.Millisecond), l.Until(), "Until moved forward")
		assert.Equal(t, 5*time.Second, pttl(t, srv, lockKey("owned")))

		lctx := l.Context()
		require.NoError(t, l.Unlock(ctx))
		<-lctx.Done()
		assert.ErrorIs(t, context.Cause(lctx), dlm.ErrUnlocked)
		assert.ErrorIs(t, l.Unlock(ctx), dlm.ErrNotHeld, "second unlock")
		assert.ErrorIs(t, l.Extend(ctx, time.Second), dlm.ErrNotHeld, "extend after unlock")
		assert.Equal(t, int64(0), do(t, srv, "EXISTS", lockKey("owned")))
	})
}

func TestReleaseAfterExpiry(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv, dlm.WithTTL(50*time.Millisecond))
		ctx := context.Background()
		l, err := m.TryLock(ctx, "short")
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond) // virtual
		assert.ErrorIs(t, l.Unlock(ctx), dlm.ErrNotHeld)
	})
}

func TestCancelledContext(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv)
		held, err := m.TryLock(context.Background(), "busy")
		require.NoError(t, err)
		defer held.Unlock(context.Background())

		const after = 30 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(after, cancel)
		start := time.Now()
		_, err = m.Lock(ctx, "busy")
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, after, time.Since(start), "returned when cancelled")

		// Already cancelled: TryLock reports both too.
		_, err = m.TryLock(ctx, "free")
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorIs(t, err, context.Canceled)

		dctx, dcancel := context.WithTimeout(context.Background(), after)
		defer dcancel()
		start = time.Now()
		_, err = m.Lock(dctx, "busy")
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, after, time.Since(start), "returned at the deadline")
		assert.ErrorIs(t, err, dlm.ErrHeld, "the last attempt's error is kept")
	})
}

func TestFencesIncrease(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := newVManager(t, srv)
		ctx := context.Background()
		var last uint64
		for i := range 20 {
			l, err := m.TryLock(ctx, "fenced")
			require.NoError(t, err)
			require.Greater(t, l.Fence(), last, "acquisition %d", i)
			last = l.Fence()
			require.NoError(t, l.Unlock(ctx))
		}
		// A different key has a counter of its own.
		l, err := m.TryLock(ctx, "other")
		require.NoError(t, err)
		assert.Equal(t, uint64(1), l.Fence())
	})
}

func TestBadInput(t *testing.T) {
	_, err := dlm.New(nil)
	assert.ErrorIs(t, err, dlm.ErrInvalid)

	_, err = strategy.NewSingle(nil)
	assert.ErrorIs(t, err, dlm.ErrInvalid)
	_, err = strategy.NewSingle(goredis.New(nil))
	assert.ErrorIs(t, err, dlm.ErrInvalid, "a nil client makes a nil node")

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opts []dlm.Option
	}{
		{"zero TTL", []dlm.Option{dlm.WithTTL(0)}},
		{"negative TTL", []dlm.Option{dlm.WithTTL(-time.Second)}},
		{"TTL above MaxTTL", []dlm.Option{dlm.WithTTL(dlm.MaxTTL + time.Millisecond)}},
		{"zero retry delay", []dlm.Option{dlm.WithRetryDelay(0, time.Second)}},
		{"max below min", []dlm.Option{dlm.WithRetryDelay(time.Second, time.Millisecond)}},
		{"zero option", []dlm.Option{{}}},
	} {
		_, err := dlm.New(s, tc.opts...)
		assert.ErrorIs(t, err, dlm.ErrInvalid, tc.name)
	}
	for _, tc := range []struct {
		name string
		opt  strategy.Option
	}{
		{"drift factor 0.5", strategy.WithDriftFactor(0.5)},
		{"negative drift factor", strategy.WithDriftFactor(-0.1)},
		{"negative timeout", strategy.WithTimeout(-1)},
		{"nil option", nil},
	} {
		_, err := strategy.NewSingle(goredis.New(c), tc.opt)
		assert.ErrorIs(t, err, dlm.ErrInvalid, tc.name)
	}

	m, err := dlm.New(s, dlm.WithTTL(2*time.Millisecond)) // below the drift margin
	require.NoError(t, err)
	ctx := context.Background()
	_, err = m.TryLock(ctx, "k")
	assert.ErrorIs(t, err, dlm.ErrInvalid, "TTL below drift margin")
	_, err = m.Lock(ctx, "k")
	assert.ErrorIs(t, err, dlm.ErrInvalid, "Lock does not wait on invalid input")

	m, err = dlm.New(s)
	require.NoError(t, err)
	_, err = m.TryLock(ctx, "")
	assert.ErrorIs(t, err, dlm.ErrInvalid, "empty key")
	_, err = m.Lock(ctx, "")
	assert.ErrorIs(t, err, dlm.ErrInvalid, "empty key")
	long := strings.Repeat("k", dlm.MaxKeyLen+1)
	_, err = m.Lock(ctx, long)
	assert.ErrorIs(t, err, dlm.ErrInvalid, "key above MaxKeyLen")
	_, err = s.Acquire(ctx, long, "t", time.Second)
	assert.ErrorIs(t, err, dlm.ErrInvalid, "key above MaxKeyLen, to the strategy")
	_, err = s.Acquire(ctx, "k", "t", dlm.MaxTTL+time.Millisecond)
	assert.ErrorIs(t, err, dlm.ErrInvalid, "TTL above MaxTTL, to the strategy")
	_, err = s.Acquire(ctx, "k", "", time.Second)
	assert.ErrorIs(t, err, dlm.ErrInvalid, "empty token")
	assert.ErrorIs(t, s.Release(ctx, "", "t"), dlm.ErrInvalid)
	_, err = s.Extend(ctx, "k", "t", 0)
	assert.ErrorIs(t, err, dlm.ErrInvalid)
}

func TestNodeFailureIsReported(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := strategy.NewSingle(goredis.New(c), strategy.WithTimeout(200*time.Millisecond))
	require.NoError(t, err)
	m, err := dlm.New(s)
	require.NoError(t, err)
	srv.Kill(t)
	_, err = m.TryLock(context.Background(), "down")
	assert.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.ErrorContains(t, err, "acquire on", "the node's error names the operation")
	assert.ErrorContains(t, err, srv.Addr, "and the node")
}

func TestReacquireWithSameToken(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	ctx := context.Background()
	a, err := s.Acquire(ctx, "again", "tok", time.Second)
	require.NoError(t, err)
	b, err := s.Acquire(ctx, "again", "tok", time.Second)
	require.NoError(t, err, "a retry after a lost reply succeeds")
	assert.Equal(t, a.Fence, b.Fence, "and does not advance the fence")
	_, err = s.Acquire(ctx, "again", "other", time.Second)
	assert.ErrorIs(t, err, dlm.ErrNotAcquired)
}

// An uncontended Lock costs what TryLock does: the token and the Lock,
// with nothing for the queue it did not have to join.
func TestUncontendedLockAllocatesAsTryLock(t *testing.T) {
	m := newM(t, &grantAll{}, dlm.WithTTL(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pair := func(take func(context.Context, string) (*dlm.Lock, error)) func() {
		return func() {
			l, err := take(ctx, "k")
			if err != nil {
				panic(err)
			}
			if err := l.Unlock(ctx); err != nil {
				panic(err)
			}
		}
	}
	try := testing.AllocsPerRun(100, pair(m.TryLock))
	lock := testing.AllocsPerRun(100, pair(m.Lock))
	t.Logf("allocations per pair: TryLock %v, Lock %v", try, lock)
	if !raceOn {
		assert.Equal(t, try, lock, "allocations of an uncontended Lock and of TryLock")
	}
}
