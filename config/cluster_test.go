package config_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

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

func TestParseURLCluster(t *testing.T) {
	c, err := config.ParseURL("cluster://u:secret@n1:7000,n2:7001,[::1]:7002?ttl=10s&renew=0.3")
	require.NoError(t, err)
	assert.Equal(t, config.Config{
		Strategy: "single", Cluster: true, Addrs: []string{"n1:7000", "n2:7001", "[::1]:7002"},
		Username: "u", Password: "secret", TTL: config.Duration(10 * time.Second), Renew: 0.3,
	}, c)

	c, err = config.ParseURL("cluster://n1:7000?strategy=failover&ack=all&replicas=1&wait_timeout=200ms")
	require.NoError(t, err)
	assert.Equal(t, config.Config{
		Strategy: "failover", Cluster: true, Addrs: []string{"n1:7000"},
		Ack: ptr(strategy.AckAll()), Replicas: ptr(1), WaitTimeout: config.Duration(200 * time.Millisecond),
	}, c)
	c, err = config.ParseURL("cluster://n1:7000?strategy=single")
	require.NoError(t, err)
	assert.Equal(t, "single", c.Strategy)

	c, err = config.ParseJSON(strings.NewReader(`{"strategy":"failover","cluster":true,"addrs":["n1:7000","n2:7001"],"ack":"1"}`))
	require.NoError(t, err)
	assert.Equal(t, config.Config{Strategy: "failover", Cluster: true, Addrs: []string{"n1:7000", "n2:7001"}, Ack: ptr(strategy.AckN(1))}, c)
	assert.Equal(t, "cluster://n1:7000,n2:7001?ack=1&strategy=failover", c.URL())

	for u, field := range map[string]string{
		"cluster://n1:7000?strategy=redlock":                "strategy: cluster:// runs single or failover",
		"cluster://n1:7000?strategy=single&strategy=single": "strategy: cluster:// runs single or failover",
		"cluster://n1:7000/mymaster":                        "master: cluster:// takes its nodes' addresses and no path",
		"cluster://n1:7000?ack=all":                         "ack: applies only to the failover strategy, not to single",
		"cluster://n1:7000,n1:7000":                         "addrs: n1:7000 is given twice",
		"cluster://n1:x":                                    `addrs: "n1:x"`,
		"cluster://n1:7000?cluster=true":                    `"cluster": unknown parameter`,
		"cluster://n1:7000?sentinel_password=x":             "sentinel_password",
		"single://n1:7000,n2:7001":                          "for a Redis Cluster: cluster://",
	} {
		_, err := config.ParseURL(u)
		require.Error(t, err, u)
		assert.ErrorIs(t, err, dlm.ErrInvalid, u)
		assert.Contains(t, err.Error(), field, u)
	}
	for doc, field := range map[string]string{
		`{"strategy":"redlock","cluster":true,"addrs":["a:1","b:1","c:1"]}`:   "cluster: a Cluster runs single or failover, not redlock",
		`{"strategy":"failover","cluster":true,"addrs":["a:1"],"master":"m"}`: "master: a Cluster is given by its nodes' addresses",
		`{"strategy":"single","cluster":"yes"}`:                               "cluster: want true or false, got string",
	} {
		_, err := config.ParseJSON(strings.NewReader(doc))
		require.Error(t, err, doc)
		assert.ErrorIs(t, err, dlm.ErrInvalid, doc)
		assert.Contains(t, err.Error(), field, doc)
	}
	_, _, err = config.Open(context.Background(), "cluster://", goredis.Dial)
	assert.ErrorIs(t, err, dlm.ErrInvalid)
	assert.ErrorContains(t, err, "addrs: no address")
}

// Passwords with every character the URL form must percent-encode work in
// cluster://, round-trip, and never show in its String or errors.
func TestClusterURLPasswords(t *testing.T) {
	for _, pw := range []string{"p#ss", "100%", "two words", "a/b", "why?", "a@b:c", "#%/? @:&=+"} {
		enc := url.UserPassword("u", pw).String()
		c, err := config.ParseURL("cluster://" + enc + "@n1:7000,n2:7001?strategy=failover")
		require.NoError(t, err, pw)
		assert.Equal(t, pw, c.Password, pw)
		assert.Equal(t, []string{"n1:7000", "n2:7001"}, c.Addrs, pw)
		back, err := config.ParseURL(c.URL())
		require.NoError(t, err, pw)
		assert.Equal(t, c, back, pw)
		b, err := json.Marshal(c)
		require.NoError(t, err)
		back, err = config.ParseJSON(strings.NewReader(string(b)))
		require.NoError(t, err, pw)
		assert.Equal(t, c, back, pw)
		for _, s := range []string{c.String(), config.Endpoint{Cluster: c.Addrs, Password: pw}.String()} {
			assert.True(t, strings.HasPrefix(s, "cluster://"), s)
			assert.NotContains(t, s, pw)
			assert.NotContains(t, s, url.PathEscape(pw))
		}
		_, err = config.ParseURL("cluster://" + enc + "@n1:7000?ack=all")
		require.Error(t, err)
		assert.NotContains(t, err.Error(), pw)
	}
}

// cluster:// opens a Manager over a real Cluster that requires a password,
// with go-redis and rueidis; redigo, which has no Cluster client, refuses
// clearly.
func TestOpenCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartClusterReplicas(t, 1, 0)
	all := append(append([]*redistest.Server{}, cl.Masters...), cl.Replicas[0]...)
	for _, s := range all {
		c := s.Client(t)
		require.NoError(t, c.ConfigSet(ctx, "masterauth", serverPassword).Err())
		require.NoError(t, c.ConfigSet(ctx, "requirepass", serverPassword).Err())
	}
	userinfo := url.UserPassword("default", serverPassword).String()
	base := "cluster://" + userinfo + "@" + cl.Masters[0].Addr + "," + cl.Masters[1].Addr
	router := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr}, Password: serverPassword})
	t.Cleanup(func() { _ = router.Close() })

	for _, d := range []struct {
		name string
		dial config.Dialer
	}{{"goredis", goredis.Dial}, {"rueidis", rueidis.Dial}, {"valkeygo", valkeygo.Dial}} {
		t.Run(d.name, func(t *testing.T) {
			m, closer, err := config.Open(ctx, base+"?ttl=5s", d.dial)
			require.NoError(t, err)
			defer closer.Close()
			assert.Equal(t, 5*time.Second, m.TTL())
			// Keys on both masters: a plain client would get MOVED for half.
			for i := range 8 {
				lockOnce(t, m, d.name+"-"+string(rune('a'+i)))
			}

			// failover on the Cluster waits for the replica of the key's master.
			m, closer2, err := config.Open(ctx, base+"?strategy=failover&ack=all&replicas=1&wait_timeout=1s&timeout=3s", d.dial)
			require.NoError(t, err)
			defer closer2.Close()
			key := ""
			for i := 0; key == ""; i++ { // a key on the master that has the replica
				k := d.name + "-f" + string(rune('a'+i))
				if mc, err := router.MasterForKey(ctx, "dlm:{"+k+"}"); err == nil && mc.Options().Addr == cl.Masters[0].Addr {
					key = k
				}
			}
			lockOnce(t, m, key)

			// A server that is not in cluster mode is not a Cluster.
			single := redistest.Start(t)
			_, c, err := config.Open(ctx, "cluster://"+single.Addr, d.dial)
			if err == nil { // go-redis finds out on the first call
				_ = c.Close()
				var m *dlm.Manager
				m, c, err = config.Open(ctx, "cluster://"+single.Addr+"?timeout=1s", d.dial)
				require.NoError(t, err)
				_, err = m.TryLock(ctx, "not-a-cluster")
				_ = c.Close()
			}
			require.Error(t, err)
			assert.Contains(t, strings.ToLower(err.Error()), "cluster")
		})
	}

	_, _, err := config.Open(ctx, base, redigo.Dial)
	require.ErrorIs(t, err, dlm.ErrInvalid)
	assert.ErrorContains(t, err, "redigo has no Redis Cluster client; dial cluster://")
	assert.ErrorContains(t, err, "with goredis.Dial, rueidis.Dial or valkeygo.Dial")
	assert.NotContains(t, err.Error(), serverPassword)
}
