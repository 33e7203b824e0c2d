package strategy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// The fence state of a server does not grow with the number of lock keys
// ever used: 100,000 distinct keys leave one counter per hash slot they
// touched, at most 16,384, and no counter of their own.
func TestFenceStateBounded(t *testing.T) {
	srv := redistest.Start(t)
	c := slowSocketClient(t, srv.Addr)
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	ctx := context.Background()
	const keys, workers = 100_000, 16
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += workers {
				if _, err := s.Acquire(ctx, fmt.Sprint("bounded-", i), "A", time.Minute); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	took := time.Since(start)

	slotsUsed := map[string]bool{}
	for i := range keys {
		_, f := strategy.Keys(fmt.Sprint("bounded-", i))
		slotsUsed[f] = true
	}
	counters, other := 0, 0
	iter := c.Scan(ctx, 0, "*", 10_000).Iterator()
	for iter.Next(ctx) {
		switch k := iter.Val(); {
		case strings.HasPrefix(k, "dlm:fence:{"):
			counters++
			assert.True(t, slotsUsed[k], "counter %s of a slot no key used", k)
		case strings.HasSuffix(k, ":fence"):
			other++
		}
	}
	require.NoError(t, iter.Err())
	t.Logf("%d distinct lock keys (%v, %d workers): %d fencing counters for %d slots used, %d per-key counters, %d keys in all",
		keys, took.Round(time.Millisecond), workers, counters, len(slotsUsed), other, c.DBSize(ctx).Val())
	assert.Equal(t, len(slotsUsed), counters, "one counter per slot used")
	assert.LessOrEqual(t, counters, 16384)
	assert.Zero(t, other, "no per-key counters")
	assert.Equal(t, int64(keys+counters), c.DBSize(ctx).Val(), "the locks and the counters, nothing else")
}

// sameSlotKey returns a key other than key whose fencing counter is key's.
func sameSlotKey(t *testing.T, key string) string {
	_, want := strategy.Keys(key)
	for i := 0; ; i++ {
		k := fmt.Sprint(key, "-", i)
		if _, f := strategy.Keys(k); f == want {
			return k
		}
	}
}

// Keys of one slot share a counter: each acquisition's fence is above
// every earlier one of the slot, and a lock keeps its own fence through
// extensions while other keys of the slot are taken.
func TestFenceSharedBySlot(t *testing.T) {
	srv := redistest.Start(t)
	s, err := strategy.NewSingle(goredis.New(slowSocketClient(t, srv.Addr)))
	require.NoError(t, err)
	ctx := context.Background()
	a, b := "shared", sameSlotKey(t, "shared")
	la, err := s.Acquire(ctx, a, "A", time.Minute)
	require.NoError(t, err)
	lb, err := s.Acquire(ctx, b, "B", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, lb.Fence, la.Fence)
	e, err := s.Extend(ctx, a, "A", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, la.Fence, e.Fence, "Extend keeps the acquisition's fence")
	again, err := s.Acquire(ctx, a, "A", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, la.Fence, again.Fence, "reacquiring with the holder's token keeps the fence")
}

// Redlock's write-back gives the lock on every node the fence of the
// grant, not only the counters: Extend then returns the acquisition's
// fence whichever majority answers it.
func TestRedlockWriteBackGivesLocksTheirFence(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	_, counter := strategy.Keys("k")
	require.NoError(t, c.clients[0].Set(ctx, counter, 10, 0).Err())
	require.NoError(t, c.clients[1].Set(ctx, counter, 20, 0).Err())
	r, err := strategy.NewRedlock(c.nodes, strategy.WithTimeout(time.Second))
	require.NoError(t, err)
	l, err := r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	require.Equal(t, uint64(21), l.Fence, "the largest counter of the granting nodes")
	assert.True(t, eventually(2*time.Second, func() bool {
		for i := range c.clients {
			if v := c.clients[i].Get(ctx, lockKey("k")).Val(); v != "21:A" {
				return false
			}
		}
		return true
	}), "every node's lock has the grant's fence")
	c.servers[1].Kill(t) // the one node that granted with 21 by itself
	e, err := r.Extend(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, e.Fence, "Extend without the node whose counter was the fence")
}

// A node whose grant arrives after the acquisition returned, with a fence
// of its own, is given the acquisition's: Extend keeps returning it.
func TestRedlockLateGrantGetsTheFence(t *testing.T) {
	c := startCluster(t, 5)
	ctx := context.Background()
	nodes := append([]driver.Node(nil), c.nodes[:4]...)
	p := redistest.StartProxy(t, c.servers[4].Addr)
	p.SetDelay(300 * time.Millisecond)
	nodes = append(nodes, goredis.New(slowSocketClient(t, p.Addr)))
	_, counter := strategy.Keys("k")
	require.NoError(t, c.clients[4].Set(ctx, counter, 100, 0).Err())
	r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(5*time.Second))
	require.NoError(t, err)
	// The first call asks every node which server it is: not this one.
	_, err = r.Acquire(ctx, "warm-up", "A", time.Minute)
	require.NoError(t, err)
	l, err := r.Acquire(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Fence, "granted by the four fast nodes")
	assert.True(t, eventually(3*time.Second, func() bool {
		return c.clients[4].Get(ctx, lockKey("k")).Val() == "1:A"
	}), "the late grant's lock got the acquisition's fence; it has %q", c.clients[4].Get(ctx, lockKey("k")).Val())
	assert.Equal(t, "101", c.clients[4].Get(ctx, counter).Val(), "its counter stays")
	e, err := r.Extend(ctx, "k", "A", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, l.Fence, e.Fence)
}

// A lock is its token's alone: a token that is a part of the holder's (a
// suffix, a prefix, the part after a ':' inside it) or has the holder's as
// a part neither releases, extends nor hands off the lock. The scripts
// compare the token with the lock's value "<fence>:<token>" without
// cutting the value apart.
func TestTokenMatchesWhole(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct{ holder, other string }{
		{"abc", "bc"}, {"abc", "ab"}, {"abc", "xabc"}, {"abc", "abcx"},
		{"a:b", "b"}, {"a:b", ":b"}, {"b", "a:b"}, {"1:a", "a"},
	} {
		key := "whole:" + tc.holder + "/" + tc.other
		l, err := s.Acquire(ctx, key, tc.holder, time.Minute)
		require.NoError(t, err)
		assert.ErrorIs(t, s.Release(ctx, key, tc.other), dlm.ErrNotHeld, "%q released %q's lock", tc.other, tc.holder)
		_, err = s.Extend(ctx, key, tc.other, time.Minute)
		assert.ErrorIs(t, err, dlm.ErrNotHeld, "%q extended %q's lock", tc.other, tc.holder)
		_, err = s.(driver.Handoff).Handoff(ctx, key, tc.other, "thief", time.Minute)
		assert.ErrorIs(t, err, dlm.ErrNotHeld, "%q handed off %q's lock", tc.other, tc.holder)
		again, err := s.Acquire(ctx, key, tc.holder, time.Minute)
		require.NoError(t, err, "the holder still holds it")
		assert.Equal(t, l.Fence, again.Fence)
		require.NoError(t, s.Release(ctx, key, tc.holder))
	}
}
