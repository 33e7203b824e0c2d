package strategy_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
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

// acquireWhenFree retries s.Acquire until it grants, for at most limit, and
// returns the lease, when the grant's call started, and the quarantine the
// first refusal reported (0 when the first call granted).
func acquireWhenFree(t *testing.T, s driver.Strategy, key, token string, ttl, limit time.Duration) (l driver.Lease, at time.Time, firstQuarantine time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for first := true; ; first = false {
		at = time.Now()
		l, err := s.Acquire(context.Background(), key, token, ttl)
		if err == nil {
			return l, at, firstQuarantine
		}
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		var held *strategy.HeldError
		if first && errors.As(err, &held) && held.Quarantined {
			firstQuarantine = held.Remaining
		}
		require.True(t, time.Now().Before(deadline), "not granted within %v: %v", limit, err)
		time.Sleep(10 * time.Millisecond)
	}
}

// uptime returns the server's uptime_in_seconds.
func uptime(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	require.NoError(t, err)
	_, rest, _ := strings.Cut(info, "uptime_in_seconds:")
	n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	require.NoError(t, err)
	return n
}

// A server restarted without persistence forgets the lock it held. With the
// amnesia guard it grants nothing until the forgotten lease has run out,
// and the next fence is above the forgotten one; without it (the control)
// a second holder is granted at once, with a fence that went back. A fresh
// server is quarantined for no more than WithMaxTTL plus 1s after its start
// (Redis rounds its uptime to whole seconds), as the server itself reports:
// the test reads the quarantine the refusal names, not the wall clock, which
// a loaded machine stretches. The retry limits only bound a hang.
func TestAmnesiaSingleRestart(t *testing.T) {
	const maxTTL = 2 * time.Second
	for _, guard := range []bool{true, false} {
		t.Run(map[bool]string{true: "guard", false: "control"}[guard], func(t *testing.T) {
			srv := redistest.Start(t)
			started := time.Now()
			var opts []strategy.Option
			if guard {
				opts = append(opts, strategy.WithMaxTTL(maxTTL))
			}
			s, err := strategy.NewSingle(goredis.New(ctxClient(t, srv.Addr)), opts...)
			require.NoError(t, err)

			_, at, q := acquireWhenFree(t, s, "amnesia", "first", time.Second, 10*maxTTL)
			t.Logf("fresh server: first grant %v after its start (quarantine reported %v)", at.Sub(started).Round(time.Millisecond), q)
			if guard {
				assert.Greater(t, q, maxTTL/2, "a fresh server is quarantined until WithMaxTTL after its start")
				assert.LessOrEqual(t, q, maxTTL+time.Second, "and no longer than WithMaxTTL plus the uptime's rounding")
			}
			// The control's A holds for a minute, which no guard bounds: the
			// restart, which a loaded machine stretches past a 2s lease,
			// still comes within it.
			ttlA := maxTTL
			if !guard {
				ttlA = time.Minute
			}
			a, _, _ := acquireWhenFree(t, s, "amnesia", "A", ttlA, 10*maxTTL)

			srv.Kill(t)
			srv.Restart(t) // empty: no persistence
			b, bAt, q := acquireWhenFree(t, s, "amnesia", "B", maxTTL, 10*maxTTL)
			t.Logf("after the restart: B granted %v after A's lease ended, quarantine reported %v; fences A %d, B %d",
				bAt.Sub(a.Until).Round(time.Millisecond), q, a.Fence, b.Fence)
			if guard {
				assert.False(t, bAt.Before(a.Until), "B was granted %v before A's lease ended", a.Until.Sub(bAt))
				assert.Greater(t, b.Fence, a.Fence, "fences go on above the forgotten one")
			} else {
				assert.True(t, bAt.Before(a.Until), "without the guard the restarted server grants at once")
				assert.Less(t, b.Fence, a.Fence, "and its fence goes back")
			}
		})
	}
}

// A server that has run for longer than WithMaxTTL (plus a second for the
// rounding of its uptime) grants the first lock of a slot at once; after FLUSHALL it grants nothing until a lease it forgot
// has run out, in that slot and in every slot it has not seen since.
func TestAmnesiaFlushAll(t *testing.T) {
	const maxTTL = time.Second
	srv := redistest.Start(t)
	c := ctxClient(t, srv.Addr)
	require.Eventually(t, func() bool { return uptime(t, c) >= 2 }, 5*time.Second, 50*time.Millisecond)
	s, err := strategy.NewSingle(goredis.New(c), strategy.WithMaxTTL(maxTTL))
	require.NoError(t, err)
	ctx := context.Background()
	a, err := s.Acquire(ctx, "flushed", "A", maxTTL)
	require.NoError(t, err, "a server up for WithMaxTTL takes a new slot at once")

	require.NoError(t, c.FlushAll(ctx).Err())
	b, bAt, q := acquireWhenFree(t, s, "flushed", "B", maxTTL, 10*maxTTL)
	t.Logf("after FLUSHALL: quarantine %v, B granted %v after A's lease ended", q, bAt.Sub(a.Until).Round(time.Millisecond))
	assert.Greater(t, q, maxTTL/2)
	assert.False(t, bAt.Before(a.Until), "B was granted before A's lease ended")
	assert.Greater(t, b.Fence, a.Fence)

	_, err = s.Acquire(ctx, "another-slot", "C", maxTTL)
	var held *strategy.HeldError
	require.ErrorAs(t, err, &held, "a slot first used after the flush is quarantined too")
	assert.True(t, held.Quarantined)
	assert.Contains(t, err.Error(), "quarantined")
}

// Redlock over five servers, three of them restarted without persistence
// while a lock is held: no second holder until the lease has run out, and
// the fence goes on above the first holder's.
func TestAmnesiaRedlockMajorityRestart(t *testing.T) {
	const maxTTL = 2 * time.Second
	c := startClusterWith(t, 5, ctxClient)
	r := c.redlock(t, strategy.WithMaxTTL(maxTTL))
	acquireWhenFree(t, r, "majority", "first", time.Second, 10*maxTTL) // fresh servers: quarantined at first
	require.NoError(t, r.Release(context.Background(), "majority", "first"))
	a, _, _ := acquireWhenFree(t, r, "majority", "A", maxTTL, 10*maxTTL)
	for _, i := range []int{0, 2, 4} {
		c.servers[i].Kill(t)
		c.servers[i].Restart(t)
	}
	b, bAt, _ := acquireWhenFree(t, r, "majority", "B", maxTTL, 10*maxTTL)
	t.Logf("B granted %v after A's lease ended; fences A %d, B %d", bAt.Sub(a.Until).Round(time.Millisecond), a.Fence, b.Fence)
	assert.False(t, bAt.Before(a.Until), "B was granted before A's lease ended")
	assert.Greater(t, b.Fence, a.Fence)
}

func TestMaxTTLBoundsTheTTL(t *testing.T) {
	srv := redistest.Start(t)
	_, err := strategy.NewSingle(goredis.New(srv.Client(t)), strategy.WithMaxTTL(0))
	require.ErrorIs(t, err, dlm.ErrInvalid)
	s, err := strategy.NewSingle(goredis.New(srv.Client(t)), strategy.WithMaxTTL(time.Second))
	require.NoError(t, err)
	_, err = s.Acquire(context.Background(), "k", "A", 2*time.Second)
	require.ErrorIs(t, err, dlm.ErrInvalid)
	assert.Contains(t, err.Error(), "WithMaxTTL")
}

// Redis counts uptime in whole seconds of the wall clock: restarted at
// x.9s, it reports an uptime of 1s at (x+1).1s. The guard takes that second
// against the lease: a lock held before the restart is not granted again
// while its lease runs (without the correction it was, in the fault suite).
// The wall clock is the subject: the lock must be taken, and the server
// restarted, within one second of it, which a loaded machine may miss a
// few times (a kill and restart then takes over 200ms), so it tries up to
// 20 times.
func TestAmnesiaUptimeRounding(t *testing.T) {
	const maxTTL = time.Second
	srv := redistest.Start(t)
	c := ctxClient(t, srv.Addr)
	s, err := strategy.NewSingle(goredis.New(c), strategy.WithMaxTTL(maxTTL))
	require.NoError(t, err)
	acquireWhenFree(t, s, "warm-up", "W", maxTTL, 10*maxTTL) // a fresh server's quarantine
	for try := 0; ; try++ {
		require.Less(t, try, 20, "never restarted late enough in a second")
		if try > 0 {
			// The restarted server's quarantine, waited out by asking it.
			acquireWhenFree(t, s, "warm-up-"+strconv.Itoa(try), "W", maxTTL, 10*maxTTL)
		}
		key := "rounding-" + strconv.Itoa(try)
		// Take the lock at about x.8s, restart at once, try at (x+1).05s.
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(800 * time.Millisecond).Sub(now))
		a, _, _ := acquireWhenFree(t, s, key, "A", maxTTL, 10*maxTTL)
		srv.Kill(t)
		srv.Restart(t)
		restarted := time.Now()
		time.Sleep(restarted.Truncate(time.Second).Add(time.Second + 50*time.Millisecond).Sub(restarted))
		if up := uptime(t, c); up < 1 || time.Since(restarted) > 500*time.Millisecond {
			continue // the restart took too long: its uptime is not rounded up
		}
		_, err := s.Acquire(context.Background(), key, "B", maxTTL)
		t.Logf("%v after the restart, uptime 1s, A's lease ends in %v: %v", time.Since(restarted).Round(time.Millisecond), time.Until(a.Until).Round(time.Millisecond), err)
		if !time.Now().Before(a.Until) {
			// A loaded machine let A's lease run out before the check
			// returned: a grant would prove nothing.
			continue
		}
		var held *strategy.HeldError
		require.ErrorAs(t, err, &held, "a second holder while A's lease runs")
		assert.True(t, held.Quarantined)
		return
	}
}
