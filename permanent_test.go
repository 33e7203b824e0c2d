package dlm_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// lockOn waits up to wait for key on a single-instance Manager over c, and
// returns the error and how long Lock took.
func lockOn(t *testing.T, c *redis.Client, key string, wait time.Duration) (error, time.Duration) {
	t.Helper()
	m := newM(t, newSingle(t, goredis.New(c)), dlm.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	l, err := m.Lock(ctx, key)
	if err == nil {
		_ = l.Unlock(context.Background())
	}
	return err, time.Since(start)
}

// Errors that waiting cannot cure end Lock within a round trip or two, with
// an error that names them.
func TestPermanentErrorsEndTheWait(t *testing.T) {
	const wait = 5 * time.Second
	open := redistest.Start(t)
	secret := redistest.Start(t, "--requirepass", "s3cret#pw")
	sentinel := redistest.StartSentinel(t, "mymaster", open, 1, 5*time.Second)
	plain := open.Client(t)
	ctx := context.Background()
	require.NoError(t, plain.HSet(ctx, "dlm:{wrongtype}", "a", "hash, not a lock").Err())
	require.NoError(t, plain.Do(ctx, "ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "+@all", "-evalsha", "-eval").Err())

	client := func(addr, user, pw string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	closed := client(open.Addr, "", "")
	require.NoError(t, closed.Close())

	for _, tc := range []struct {
		name, want string
		c          *redis.Client
		key        string
	}{
		{"WRONGTYPE", "WRONGTYPE", plain, "wrongtype"},
		{"NOAUTH", "NOAUTH", client(secret.Addr, "", ""), "k"},
		{"WRONGPASS", "WRONGPASS", client(secret.Addr, "", "not-it"), "k"},
		{"NOPERM", "NOPERM", client(open.Addr, "noscripts", "pw"), "k"},
		{"no EVALSHA (a Sentinel's port)", "unknown command", client(sentinel.Addr, "", ""), "k"},
		{"closed client", "closed", closed, "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, took := lockOn(t, tc.c, tc.key, wait)
			require.Error(t, err)
			assert.True(t, dlm.Permanent(err), "%v", err)
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "ended before the wait did")
			assert.ErrorContains(t, err, tc.want)
			assert.Less(t, took, time.Second, "one or two round trips, not the %v wait", wait)
		})
	}
}

// Errors the deployment can cure keep Lock waiting.
func TestTransientErrorsKeepWaiting(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		s := redistest.Start(t)
		s.Kill(t)
		err, took := lockOn(t, s.Client(t), "k", 300*time.Millisecond)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, dlm.Permanent(err), "%v", err)
		assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	})
	t.Run("READONLY", func(t *testing.T) {
		primary, replica := redistest.Start(t), redistest.Start(t)
		replica.ReplicaOf(t, primary)
		err, took := lockOn(t, replica.Client(t), "k", 300*time.Millisecond)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "READONLY", "the refusal seen is named, not only the deadline")
		assert.False(t, dlm.Permanent(err), "%v", err)
		assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	})
	t.Run("BUSY, then granted", func(t *testing.T) {
		c := redistest.Start(t, "--busy-reply-threshold", "50").Client(t)
		busy := make(chan error, 1)
		go func() { // a script that keeps the server busy for about 600ms
			busy <- c.Eval(context.Background(),
				"local t = redis.call('TIME'); local e = t[1]*1e6 + t[2] + 6e5; "+
					"repeat t = redis.call('TIME') until t[1]*1e6 + t[2] > e; return 0", nil).Err()
		}()
		time.Sleep(100 * time.Millisecond)
		err, took := lockOn(t, c, "k", 5*time.Second)
		assert.NoError(t, err, "granted once the server is free again")
		assert.GreaterOrEqual(t, took, 300*time.Millisecond, "it was busy when Lock began")
		assert.NoError(t, <-busy)
	})
}
