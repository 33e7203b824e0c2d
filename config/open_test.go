package config_test

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

var dialers = []struct {
	name string
	dial config.Dialer
}{{"goredis", goredis.Dial}, {"redigo", redigo.Dial}, {"rueidis", rueidis.Dial}, {"valkeygo", valkeygo.Dial}}

// Passwords with every character the URL form must percent-encode.
const (
	serverPassword   = "p#ss%w rd/?x@:"
	sentinelPassword = "s3n#%t /?l"
)

// lockOnce takes key through m, checks its fence is 1 and releases it.
func lockOnce(t *testing.T, m *dlm.Manager, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := m.TryLock(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), l.Fence())
	require.NoError(t, l.Unlock(ctx))
}

// Open gives a working Manager from a URL for every deployment kind, over
// every driver, with passwords that need percent-encoding.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	userinfo := url.UserPassword("default", serverPassword).String()
	single := redistest.Start(t, "--requirepass", serverPassword)
	masters := redistest.StartN(t, 3, "--requirepass", serverPassword)
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1, SentinelPassword: sentinelPassword})
	var addrs []string
	for _, s := range masters {
		addrs = append(addrs, s.Addr)
	}
	authed := func(s *redistest.Server) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: serverPassword})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			key := "open-" + d.name

			m, closer, err := config.Open(ctx, "single://"+userinfo+"@"+single.Addr+"?ttl=5s", d.dial)
			require.NoError(t, err)
			assert.Equal(t, 5*time.Second, m.TTL())
			lockOnce(t, m, key)
			assert.Equal(t, "1", authed(single).Get(ctx, fenceOf(key)).Val())
			require.NoError(t, closer.Close())

			// A password alone (no user name) works too.
			m, closer, err = config.Open(ctx, "redlock://:"+url.PathEscape(serverPassword)+"@"+strings.Join(addrs, ",")+"?timeout=2s", d.dial)
			require.NoError(t, err)
			lockOnce(t, m, key)
			holding := 0
			for _, s := range masters {
				if authed(s).Get(ctx, fenceOf(key)).Val() == "1" {
					holding++
				}
			}
			assert.GreaterOrEqual(t, holding, 2, "a quorum of the masters granted the lock")
			require.NoError(t, closer.Close())

			// Through the Sentinels, which require their own password; the
			// replica acknowledged the lock before it was granted.
			m, closer, err = config.Open(ctx, "sentinel://"+strings.Join(topo.SentinelAddrs(), ",")+"/"+topo.Master+
				"?ack=all&replicas=1&wait_timeout=1s&sentinel_password="+url.QueryEscape(sentinelPassword), d.dial)
			require.NoError(t, err)
			lockOnce(t, m, key)
			assert.Equal(t, "1", topo.Replicas[0].Client(t).Get(ctx, fenceOf(key)).Val())
			require.NoError(t, closer.Close())
		})
	}
}

// A wrong password fails the lock, and no error shows a password.
func TestOpenWrongPasswordHidden(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, "--requirepass", serverPassword)
	const wrong = "Wr0ng#%/?pw"
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			u := "single://" + url.UserPassword("default", wrong).String() + "@" + srv.Addr + "?timeout=2s"
			m, closer, err := config.Open(ctx, u, d.dial)
			require.NoError(t, err, "nothing is refused before the first call")
			defer closer.Close()
			_, err = m.TryLock(ctx, "wrong")
			require.Error(t, err)
			assert.NotContains(t, err.Error(), wrong)
			assert.NotContains(t, err.Error(), "Wr0ng")
			assert.NotContains(t, err.Error(), serverPassword)
		})
	}
	// Sentinels that cannot be asked: an error for the dialers that ask at
	// once, and none of them shows the password.
	u := "sentinel://127.0.0.1:1/m?sentinel_password=" + url.QueryEscape(wrong)
	for _, d := range dialers {
		m, closer, err := config.Open(ctx, u, d.dial)
		if err == nil {
			_, err = m.TryLock(ctx, "wrong")
			require.NoError(t, closer.Close())
		}
		require.Error(t, err, d.name)
		assert.NotContains(t, err.Error(), "Wr0ng", d.name)
	}
}

// The Manager and strategy Open builds carry the Config's options: shown by
// what they do on real servers.
func TestOpenAppliesOptions(t *testing.T) {
	ctx := context.Background()
	servers := redistest.StartN(t, 3)
	var nodes []driver.Node
	var addrs []string
	for _, s := range servers {
		nodes = append(nodes, goredis.New(s.Client(t)))
		addrs = append(addrs, s.Addr)
	}

	c, err := config.ParseURL("redlock://" + strings.Join(addrs, ",") + "?timeout=2s")
	require.NoError(t, err)
	s, err := c.NewStrategy(nodes...)
	require.NoError(t, err)
	rl := s.(interface {
		Quorum() int
		Timeout() time.Duration
	})
	assert.Equal(t, 2, rl.Quorum())
	assert.Equal(t, 2*time.Second, rl.Timeout())

	// A lone primary has no replica: ack=all with replicas=1 refuses, ack=none grants.
	m, closer, err := config.Open(ctx, "failover://"+addrs[0]+"?ack=all&replicas=1&wait_timeout=20ms", goredis.Dial)
	require.NoError(t, err)
	defer closer.Close()
	_, err = m.TryLock(ctx, "cfg-f")
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.Regexp(t, `\d+ of 1 replicas acknowledged`, err.Error(), "the policy wanted the one replica")
	m, closer, err = config.Open(ctx, "failover://"+addrs[0]+"?ack=none", goredis.Dial)
	require.NoError(t, err)
	defer closer.Close()
	_, err = m.TryLock(ctx, "cfg-f2") // cfg-f's rollback above settles in the background
	assert.NoError(t, err)

	// The caller's options come after the URL's.
	m, closer, err = config.Open(ctx, "single://"+addrs[1]+"?ttl=5s", goredis.Dial, dlm.WithTTL(7*time.Second))
	require.NoError(t, err)
	defer closer.Close()
	assert.Equal(t, 7*time.Second, m.TTL())

	// renew keeps a lock past its TTL; max_hold ends it.
	m, closer, err = config.Open(ctx, "single://"+addrs[2]+"?ttl=400ms&renew=0.3&max_hold=1200ms", goredis.Dial)
	require.NoError(t, err)
	defer closer.Close()
	start := time.Now()
	l, err := m.TryLock(ctx, "cfg-renew")
	require.NoError(t, err)
	select {
	case <-l.Context().Done():
		t.Fatalf("lease ended after %v, before max_hold: %v", time.Since(start), context.Cause(l.Context()))
	case <-time.After(time.Second):
	}
	select {
	case <-l.Context().Done():
		assert.ErrorIs(t, context.Cause(l.Context()), dlm.ErrLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the lease outlived max_hold by more than 5s")
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	_, _, err := config.Config{Strategy: "single"}.Open(ctx, goredis.Dial)
	assert.ErrorIs(t, err, dlm.ErrInvalid)
	assert.ErrorContains(t, err, "addrs: no address")
	_, _, err = config.Open(ctx, "redlock://h:1?ack=all", goredis.Dial)
	assert.ErrorIs(t, err, dlm.ErrInvalid)

	// A Dialer that fails on the third master: the first two are closed,
	// and the error names the endpoint.
	var opened []io.Closer
	failing := func(ctx context.Context, ep config.Endpoint) (driver.Node, io.Closer, error) {
		if ep.Addr == "127.0.0.1:3" {
			return nil, nil, errors.New("no route")
		}
		n, c, err := goredis.Dial(ctx, ep)
		opened = append(opened, c)
		return n, c, err
	}
	_, _, err = config.Open(ctx, "redlock://u:pw@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", failing)
	require.Error(t, err)
	assert.ErrorContains(t, err, "dial 127.0.0.1:3: no route")
	require.Len(t, opened, 2)
	for _, c := range opened {
		assert.Error(t, c.Close(), "already closed by Open")
	}
}

// fenceOf returns the Redis key of key's fencing counter.
func fenceOf(key string) string {
	_, f := strategy.Keys(key)
	return f
}

// Issue 33: a master name no Sentinel knows ends Lock at once, on every
// driver, with a permanent error that names it (before: "script replied
// nil, want an array of integers", retried for the whole wait).
func TestUnknownMasterName(t *testing.T) {
	sentinel := redistest.StartSentinel(t, "mymaster", redistest.Start(t), 1, 5*time.Second)
	cfg, err := config.ParseURL("sentinel://" + sentinel.Addr + "/nosuchmaster")
	require.NoError(t, err)
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m, closer, err := cfg.Open(ctx, d.dial)
			if err == nil {
				defer closer.Close()
				_, err = m.Lock(ctx, "k")
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, driver.ErrUnknownMaster)
			assert.True(t, dlm.Permanent(err), "%v", err)
			assert.ErrorContains(t, err, `"nosuchmaster"`)
			assert.NoError(t, ctx.Err(), "ended before the wait did: %v", err)
		})
	}
}
