package dlm_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/dlmgo/dlm/nodekit"
)

// lockOn waits up to wait for key on a single-instance Manager over c, and
// returns the error and how long Lock took.
// lockOn runs one Lock with the given wait and returns its error and
// whether its context had ended when it returned.
func lockOn(t *testing.T, c *redis.Client, key string, wait time.Duration) (err error, ended bool) {
	t.Helper()
	m := newM(t, newSingle(t, goredis.New(c)), dlm.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l, err := m.Lock(ctx, key)
	ended = ctx.Err() != nil
	if err == nil {
		_ = l.Unlock(context.Background())
	}
	return err, ended
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
			err, ended := lockOn(t, tc.c, tc.key, wait)
			require.Error(t, err)
			assert.True(t, dlm.Permanent(err), "%v", err)
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "ended before the wait did")
			assert.ErrorContains(t, err, tc.want)
			assert.False(t, ended, "ended by the error, not by the %v wait", wait)
		})
	}
}

// Errors the deployment can cure keep Lock waiting.
func TestTransientErrorsKeepWaiting(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		s := redistest.Start(t)
		s.Kill(t)
		err, ended := lockOn(t, s.Client(t), "k", 300*time.Millisecond)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, dlm.Permanent(err), "%v", err)
		assert.True(t, ended, "Lock kept trying until its context ended")
	})
	t.Run("READONLY", func(t *testing.T) {
		primary, replica := redistest.Start(t), redistest.Start(t)
		replica.ReplicaOf(t, primary)
		err, ended := lockOn(t, replica.Client(t), "k", 300*time.Millisecond)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "READONLY", "the refusal seen is named, not only the deadline")
		assert.False(t, dlm.Permanent(err), "%v", err)
		assert.True(t, ended, "Lock kept trying until its context ended")
	})
	t.Run("BUSY, then granted", func(t *testing.T) {
		c := redistest.Start(t, "--busy-reply-threshold", "50").Client(t)
		busy := make(chan error, 1)
		go func() { // a script that keeps the server busy for about 600ms
			busy <- c.Eval(context.Background(),
				"local t = redis.call('TIME'); local e = t[1]*1e6 + t[2] + 6e5; "+
					"repeat t = redis.call('TIME') until t[1]*1e6 + t[2] > e; return 0", nil).Err()
		}()
		require.Eventually(t, func() bool { // Lock begins while the server replies BUSY
			err := c.Ping(context.Background()).Err()
			return err != nil && strings.HasPrefix(err.Error(), "BUSY")
		}, 5*time.Second, time.Millisecond)
		err, _ := lockOn(t, c, "k", 5*time.Second)
		assert.NoError(t, err, "granted once the server is free again")
		assert.NoError(t, <-busy)
	})
}

// Replies are classified by their code and message, the same whatever the
// client's wording (rueidis strips "ERR "), and only as *driver.ReplyError.
func TestPermanentByMeaning(t *testing.T) {
	for _, tc := range []struct {
		text      string
		permanent bool
	}{
		{"ERR unknown command 'EVALSHA', with args beginning with: ", true},
		{"unknown command 'EVALSHA', with args beginning with: ", true}, // rueidis
		{"NOAUTH Authentication required.", true},
		{"WRONGPASS invalid username-password pair or user is disabled.", true},
		{"NOPERM this user has no permissions to run the 'eval' command", true},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", true},
		{"DENIED Redis is running in protected mode", true},
		{"ERR AUTH <password> called without any password configured for the default user.", true},
		{"AUTH <password> called without any password configured for the default user.", true}, // rueidis
		{"ERR No such master with that name", true},
		{"No such master with that name", true}, // rueidis
		{"ERR the script refuses", false},
		{"the script refuses", false},
		{"BUSY Redis is busy running a script.", false},
		{"LOADING Redis is loading the dataset in memory", false},
		{"READONLY You can't write against a read only replica.", false},
		{"TRYAGAIN Multiple keys request during rehashing of slot", false},
		{"CLUSTERDOWN The cluster is down", false},
		{"NOSCRIPT No matching script.", false},
		{"ERR DB index is out of range", true}, // SELECT of a database the server lacks
		{"DB index is out of range", true},     // rueidis
	} {
		r := nodekit.Reply(tc.text, errors.New(tc.text))
		assert.Equal(t, tc.permanent, dlm.Permanent(r), "%q as %q", tc.text, r)
		assert.Equal(t, tc.permanent, dlm.Permanent(fmt.Errorf("wrapped: %w", errors.Join(errors.New("other"), r))), "%q wrapped", tc.text)
		assert.False(t, dlm.Permanent(errors.New(tc.text)), "%q not mapped to a ReplyError", tc.text)
		assert.Equal(t, strings.HasPrefix(tc.text, "NOSCRIPT"), errors.Is(r, driver.ErrNoScript), "%q matches ErrNoScript", tc.text)
		assert.Equal(t, strings.Contains(tc.text, "DB index"), errors.Is(r, dlm.ErrInvalid), "%q matches ErrInvalid", tc.text)
	}
	assert.True(t, dlm.Permanent(fmt.Errorf("%w %q", driver.ErrUnknownMaster, "m")))
}
