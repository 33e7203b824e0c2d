package strategy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func ptr[T any](v T) *T { return &v }

func TestParseURL(t *testing.T) {
	c, err := strategy.ParseURL("single://u:secret@127.0.0.1:6379?ttl=10s&timeout=50ms&drift_factor=0.02")
	require.NoError(t, err)
	assert.Equal(t, strategy.Config{
		Strategy: "single", Addrs: []string{"127.0.0.1:6379"}, Username: "u", Password: "secret",
		TTL: strategy.Duration(10 * time.Second), Timeout: strategy.Duration(50 * time.Millisecond), DriftFactor: ptr(0.02),
	}, c)
	assert.Len(t, c.Options(), 2)

	c, err = strategy.ParseURL("redlock://h1:6379,h2:6379,h3:6379?ttl=10s&max_extensions=3&max_hold=1m")
	require.NoError(t, err)
	assert.Equal(t, strategy.Config{
		Strategy: "redlock", Addrs: []string{"h1:6379", "h2:6379", "h3:6379"},
		TTL: strategy.Duration(10 * time.Second), MaxExtensions: 3, MaxHold: strategy.Duration(time.Minute),
	}, c)

	c, err = strategy.ParseURL("sentinel://s1:26379,s2:26379/mymaster?ack=2&replicas=0&wait_timeout=250ms&wait_aof=local")
	require.NoError(t, err)
	assert.Equal(t, strategy.Config{
		Strategy: "failover", Addrs: []string{"s1:26379", "s2:26379"}, Master: "mymaster",
		Ack: ptr(strategy.AckN(2)), Replicas: ptr(0), WaitTimeout: strategy.Duration(250 * time.Millisecond), WaitAOF: "local",
	}, c)

	// failover:// with a path is sentinel://; without, the primary's address.
	c2, err := strategy.ParseURL("failover://s1:26379,s2:26379/mymaster?ack=2&replicas=0&wait_timeout=250ms&wait_aof=local")
	require.NoError(t, err)
	assert.Equal(t, c, c2)
	c, err = strategy.ParseURL("failover://primary:6379?ack=majority")
	require.NoError(t, err)
	assert.Equal(t, strategy.Config{Strategy: "failover", Addrs: []string{"primary:6379"}, Ack: ptr(strategy.AckMajority())}, c)

	// IPv6 addresses, which url.Parse alone refuses in a list.
	c, err = strategy.ParseURL("redlock://u:p@[::1]:6379,[::1]:6380,10.0.0.1:6379?ttl=10s")
	require.NoError(t, err)
	assert.Equal(t, strategy.Config{
		Strategy: "redlock", Addrs: []string{"[::1]:6379", "[::1]:6380", "10.0.0.1:6379"},
		Username: "u", Password: "p", TTL: strategy.Duration(10 * time.Second),
	}, c)
	c, err = strategy.ParseURL("sentinel://[fe80::1%25eth0]:26379,[::1]:26379/mymaster")
	require.NoError(t, err)
	assert.Equal(t, []string{"[fe80::1%25eth0]:26379", "[::1]:26379"}, c.Addrs)
}

// Config → URL → Config and Config → JSON → Config give back the Config.
func TestConfigRoundTrip(t *testing.T) {
	for _, c := range []strategy.Config{
		{Strategy: "single", Addrs: []string{"127.0.0.1:6379"}},
		{Strategy: "single", Addrs: []string{"h:1"}, Username: "u", Password: "p@ss/w:rd", TTL: strategy.Duration(1500 * time.Millisecond),
			Timeout: strategy.Duration(time.Second), DriftFactor: ptr(0.0)},
		{Strategy: "redlock", Addrs: []string{"a:1", "b:2", "c:3"}, MaxExtensions: 5, MaxHold: strategy.Duration(time.Hour), DriftFactor: ptr(0.05)},
		{Strategy: "failover", Addrs: []string{"s1:26379", "s2:26379", "s3:26379"}, Master: "mymaster", Password: "pw",
			Ack: ptr(strategy.AckNone()), Replicas: ptr(2), WaitTimeout: strategy.Duration(time.Second), WaitAOF: "local"},
		{Strategy: "failover", Addrs: []string{"primary:6379"}, Ack: ptr(strategy.AckN(3)), Replicas: ptr(0)},
		{Strategy: "failover", Addrs: []string{"s1:26379"}, Master: "m", SentinelUsername: "su", SentinelPassword: "s&cret="},
		{Strategy: "redlock", Addrs: []string{"[::1]:6379", "[::1]:6380", "127.0.0.1:6381"}},
	} {
		require.NoError(t, c.Validate(), c.URL())
		back, err := strategy.ParseURL(c.URL())
		require.NoError(t, err, c.URL())
		assert.Equal(t, c, back, c.URL())

		b, err := json.Marshal(c)
		require.NoError(t, err)
		back, err = strategy.ParseConfig(strings.NewReader(string(b)))
		require.NoError(t, err, string(b))
		assert.Equal(t, c, back, string(b))

		for _, pw := range []string{c.Password, c.SentinelPassword} {
			if pw != "" {
				assert.NotContains(t, c.String(), pw, "String redacts the passwords")
				assert.NotContains(t, c.String(), url.QueryEscape(pw), "String redacts the passwords")
			}
		}
	}
	c, err := strategy.ParseURL("failover://s1:26379/m?ack=all")
	require.NoError(t, err)
	assert.Equal(t, "sentinel://s1:26379/m?ack=all", c.URL())
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for url, field := range map[string]string{
		"single://h:1?tll=10s":                        `"tll": unknown parameter`,
		"single://h:1?ttl=ten":                        `ttl: "ten" is not a duration`,
		"single://h:1?ttl=-1s":                        "ttl",
		"single://h:1?timeout=-1s":                    "timeout",
		"single://h:1?drift_factor=0.9":               "drift_factor",
		"single://h:1?drift_factor=x":                 "drift_factor",
		"single://h:1?addrs=x":                        `"addrs"`,
		"single://h:1?ttl=1s&ttl=2s":                  `ttl: given 2 times`,
		"single://h:1,h:2":                            "addrs",
		"nosuch://h:1":                                `unknown strategy "nosuch"`,
		"h:1":                                         "strategy",
		"single://h:1,,h:2":                           "addrs",
		"single://h:1?ttl=10s&unknown=yes":            `"unknown"`,
		"single://h:1/m":                              "master: applies only to the failover strategy",
		"single://h:1?max_hold=1s":                    "max_hold: applies only to the redlock strategy",
		"redlock://h:1,h:2?ack=all":                   "ack: applies only to the failover strategy, not to redlock",
		"redlock://h:1,h:2?replicas=1":                "replicas: applies only to the failover strategy",
		"redlock://h:1,h:2?wait_timeout=1s":           "wait_timeout: applies only",
		"redlock://h:1,h:2?wait_aof=local":            "wait_aof: applies only",
		"redlock://h:1,h:2,h:1":                       "addrs: h:1 is given twice",
		"redlock://h:1?max_extensions=-1":             "max_extensions",
		"redlock://h:1?max_extensions=1.5":            "max_extensions: want an integer",
		"redlock://h:1?max_hold=-1s":                  "max_hold",
		"sentinel://s:1/m?ack=most":                   `ack policy "most"`,
		"sentinel://s:1/m?ack=0":                      `ack policy "0"`,
		"sentinel://s:1/m?max_extensions=2":           "max_extensions: applies only to the redlock strategy",
		"sentinel://s:1/m?replicas=-1":                "replicas",
		"sentinel://s:1/m?wait_timeout=0.5ms":         "wait_timeout",
		"sentinel://s:1/m?wait_aof=yes":               "wait_aof",
		"sentinel://s:1/m?ack=none&wait_aof=replicas": "wait_aof",
		"sentinel://s:1/m?timeout=100ms":              "timeout: 100ms must exceed the wait timeout 100ms",
		"sentinel://s:1,s:2":                          "master: sentinel:// needs the master name",
		"failover://p:1,p:2":                          "addrs: failover without master",
		"failover://p:1?sentinel_password=x":          "sentinel_password: applies only through Sentinel",
		"redlock://h:1?sentinel_username=u":           "sentinel_username: applies only to the failover strategy",
		"redlock://[::1]:1,[::1:2,h:3":                `addrs: "[::1:2"`,
		"redlock://h:1,h:x,h:3":                       `addrs: "h:x"`,
	} {
		_, err := strategy.ParseURL(url)
		require.Error(t, err, url)
		assert.ErrorIs(t, err, dlm.ErrInvalid, url)
		assert.Contains(t, err.Error(), field, url)
	}
	// What is valid next to the cases above.
	for _, url := range []string{
		"sentinel://s:1/m?timeout=200ms",
		"sentinel://s:1/m?ack=none&timeout=10ms",
		"sentinel://s:1/m?ack=none&wait_aof=local",
		"redlock://h:1",
	} {
		_, err := strategy.ParseURL(url)
		assert.NoError(t, err, url)
	}
}

func TestParseConfigJSON(t *testing.T) {
	c, err := strategy.ParseConfig(strings.NewReader(`{"strategy":"failover","addrs":["s:1"],"master":"m","ack":"majority","replicas":2,"ttl":"2s"}`))
	require.NoError(t, err)
	assert.Equal(t, strategy.Config{Strategy: "failover", Addrs: []string{"s:1"}, Master: "m",
		Ack: ptr(strategy.AckMajority()), Replicas: ptr(2), TTL: strategy.Duration(2 * time.Second)}, c)

	for doc, field := range map[string]string{
		`{"strategy":"single","ttl":"2s","colour":"red"}`: `"colour": unknown field`,
		`{"strategy":"single","ttl":2}`:                   "ttl: want a duration string",
		`{"strategy":"single","ttl":"2"}`:                 `ttl: "2" is not a duration`,
		`{"strategy":"redblack"}`:                         "strategy",
		`{}`:                                              "strategy: missing",
		`{"strategy":"redlock","addrs":"a:1"}`:            "addrs: want a list of strings",
		`{"strategy":"redlock","max_extensions":"3"}`:     "max_extensions: want an integer",
		`{"strategy":"redlock","ack":"all"}`:              "ack: applies only to the failover strategy",
		`{"strategy":"failover","ack":"sometimes"}`:       `ack: ack policy "sometimes"`,
		`{"strategy":"single"} {"strategy":"single"}`:     "one JSON object",
		`["single"]`: "one JSON object",
	} {
		_, err := strategy.ParseConfig(strings.NewReader(doc))
		require.Error(t, err, doc)
		assert.ErrorIs(t, err, dlm.ErrInvalid, doc)
		assert.Contains(t, err.Error(), field, doc)
	}
}

func unreachableNodes(t *testing.T, n int) []dlm.Node {
	var nodes []dlm.Node
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, goredis.New(c))
	}
	return nodes
}

func TestConfigNewNodeCounts(t *testing.T) {
	nodes := unreachableNodes(t, 3)
	for url, n := range map[string]int{"single://h:1": 1, "sentinel://s:1/m": 1, "failover://p:1": 1, "redlock://a:1,b:1,c:1": 3} {
		c, err := strategy.ParseURL(url)
		require.NoError(t, err)
		_, err = c.New()
		assert.ErrorIs(t, err, dlm.ErrInvalid, "%s: no node", url)
		_, err = c.New(nil)
		assert.ErrorIs(t, err, dlm.ErrInvalid, "%s: nil node", url)
		_, err = c.New(nodes[:n]...)
		assert.NoError(t, err, url)
		if n == 1 {
			_, err = c.New(nodes[:2]...)
			assert.ErrorIs(t, err, dlm.ErrInvalid, url)
			assert.ErrorContains(t, err, "nodes: ")
		}
	}
	c, _ := strategy.ParseURL("redlock://a:1,b:1")
	_, err := c.New(nodes[0], nodes[0])
	assert.ErrorIs(t, err, dlm.ErrInvalid, "the same node twice")
	_, err = strategy.Config{Strategy: "redlock", Addrs: []string{"a:1"}}.New(nodes[0])
	assert.NoError(t, err)
	_, err = strategy.Config{Strategy: "single", Addrs: []string{"a:1"}, MaxHold: strategy.Duration(time.Second)}.New(nodes[0])
	assert.ErrorIs(t, err, dlm.ErrInvalid, "New validates")
}

// The strategy New builds carries the Config's options: shown by what they
// do on real servers.
func TestConfigNewAppliesOptions(t *testing.T) {
	ctx := context.Background()
	servers := redistest.StartN(t, 3)
	var nodes []dlm.Node
	var addrs []string
	for _, s := range servers {
		nodes = append(nodes, goredis.New(s.Client(t)))
		addrs = append(addrs, s.Addr)
	}

	c, err := strategy.ParseURL("redlock://" + strings.Join(addrs, ",") + "?timeout=2s&max_extensions=1")
	require.NoError(t, err)
	s, err := c.New(nodes...)
	require.NoError(t, err)
	rl := s.(*strategy.Redlock)
	assert.Equal(t, 2, rl.Quorum())
	assert.Equal(t, 2*time.Second, rl.Timeout())
	_, err = rl.Acquire(ctx, "cfg", "tok", 10*time.Second)
	require.NoError(t, err)
	_, err = rl.Extend(ctx, "cfg", "tok", 10*time.Second)
	require.NoError(t, err)
	_, err = rl.Extend(ctx, "cfg", "tok", 10*time.Second)
	assert.ErrorIs(t, err, strategy.ErrExtendLimit, "max_extensions=1")
	require.NoError(t, rl.Release(ctx, "cfg", "tok"))

	// A lone primary has no replica: ack=all with replicas=1 refuses, ack=none grants.
	c, err = strategy.ParseURL("failover://" + addrs[0] + "?ack=all&replicas=1&wait_timeout=20ms")
	require.NoError(t, err)
	s, err = c.New(nodes[0])
	require.NoError(t, err)
	_, err = s.Acquire(ctx, "cfg-f", "tok", 10*time.Second)
	var ae *strategy.AckError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 1, ae.Wanted)
	c, err = strategy.ParseURL("failover://" + addrs[0] + "?ack=none")
	require.NoError(t, err)
	s, err = c.New(nodes[0])
	require.NoError(t, err)
	_, err = s.Acquire(ctx, "cfg-f", "tok", 10*time.Second)
	assert.NoError(t, err)
}
