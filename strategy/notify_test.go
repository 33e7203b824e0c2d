package strategy_test

import (
	"context"
	"regexp"
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
	"github.com/dlmgo/dlm/internal/mgr"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// publishes returns how many PUBLISH commands the server ran, scripts'
// included.
func publishes(t *testing.T, c *redis.Client) int { return calls(t, c, "publish") }

// calls returns how many times the server ran the command cmd (lower
// case), scripts' calls included.
func calls(t *testing.T, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// A release publishes only when an acquisition was refused on the lock: the
// refusal marks the lock in the same script; an extension and a hand-off
// keep the mark; a refusal gives back the fence it took, so the slot's
// fences stay consecutive. Likewise on Redis 6.0 (a real 6.0.16: see
// redistest.Builds), whose acquisitions read the lock first; from 7.0 an
// acquisition that is granted reads nothing but what its SET answers.
func TestReleasePublishesOnlyForWaiters(t *testing.T) {
	for _, name := range []string{redistest.Redis70, redistest.Redis60} {
		t.Run(name, func(t *testing.T) {
			s := redistest.StartBuild(t, redistest.Find(t, name))
			testReleasePublishes(t, s.Client(t), name == redistest.Redis60)
		})
	}
}

func testReleasePublishes(t *testing.T, c *redis.Client, before70 bool) {
	ctx := context.Background()
	s, err := strategy.NewSingle(goredis.New(c), strategy.WithCoalescing(false))
	require.NoError(t, err)
	key := "waited"
	lock, counter := strategy.Keys(key)
	woken := make(chan struct{}, 8)
	stop, err := s.WatchRelease(ctx, key, func() { woken <- struct{}{} })
	require.NoError(t, err)
	defer stop()

	l, err := s.Acquire(ctx, key, "A", time.Minute)
	require.NoError(t, err)
	if before70 {
		assert.Equal(t, 1, calls(t, c, "get"), "the lock was read first")
	} else {
		assert.Zero(t, calls(t, c, "get"), "a grant read nothing: INCR, then SET NX GET")
	}
	assert.Equal(t, mgr.LockValue(l.Fence, "A"), c.Get(ctx, lock).Val(), "not marked: nobody waits")
	require.NoError(t, s.Release(ctx, key, "A"))
	assert.Zero(t, publishes(t, c), "a release nobody waited for publishes nothing")

	l, err = s.Acquire(ctx, key, "A", time.Minute)
	require.NoError(t, err)
	_, err = s.Acquire(ctx, key, "B", time.Minute)
	var held *strategy.HeldError
	require.ErrorAs(t, err, &held)
	assert.Greater(t, held.Remaining, 50*time.Second)
	assert.Equal(t, "0"+mgr.LockValue(l.Fence, "A"), c.Get(ctx, lock).Val(), "the refusal marked the lock")
	assert.Equal(t, strconv.FormatUint(l.Fence, 10), c.Get(ctx, counter).Val(), "the refusal gave its fence back")
	assert.Greater(t, c.PTTL(ctx, lock).Val(), 50*time.Second, "marking kept the TTL")
	e, err := s.Extend(ctx, key, "A", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, e.Fence, "a marked lock keeps its fence")
	again, err := s.Acquire(ctx, key, "A", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, again.Fence, "reacquired by its holder")
	h, err := s.(driver.Handoff).Handoff(ctx, key, "A", "C", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Fence+1, h.Fence, "consecutive: no fence was used up")
	assert.Equal(t, "0"+mgr.LockValue(h.Fence, "C"), c.Get(ctx, lock).Val(), "the hand-off kept the mark")
	drainHints(woken)
	require.NoError(t, s.Release(ctx, key, "C"))
	assert.Equal(t, 1, publishes(t, c), "the release of a lock someone waited for publishes")
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher was not woken by the release")
	}

	// A refusal on a slot whose counter is missing leaves it missing.
	require.NoError(t, c.Set(ctx, lock, "7:D", time.Minute).Err())
	require.NoError(t, c.Del(ctx, counter).Err())
	_, err = s.Acquire(ctx, key, "E", time.Minute)
	require.ErrorAs(t, err, &held)
	assert.Zero(t, c.Exists(ctx, counter).Val())
	assert.Equal(t, "07:D", c.Get(ctx, lock).Val())
}

// Redlock: a refusal marks the lock on the nodes that refused, and the
// release then wakes a watcher.
func TestRedlockReleaseWakesWaiter(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	r := c.redlock(t, strategy.WithTimeout(time.Second))
	woken := make(chan struct{}, 8)
	stop, err := r.WatchRelease(ctx, "k", func() { woken <- struct{}{} })
	require.NoError(t, err)
	defer stop()
	_, err = r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	_, err = r.Acquire(ctx, "k", "B", time.Minute)
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	// The refusal is decided once a majority refused: the last node's
	// reply may still be on its way, so its mark is waited for.
	for i := range c.clients {
		require.Eventually(t, func() bool {
			return strings.HasPrefix(c.clients[i].Get(ctx, lockKey("k")).Val(), "0")
		}, 5*time.Second, 5*time.Millisecond, "node %d marked", i)
	}
	drainHints(woken)
	require.NoError(t, r.Release(ctx, "k", "A"))
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher was not woken by the release")
	}
}

func drainHints(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
