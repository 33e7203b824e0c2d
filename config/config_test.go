package config_test

import (
	"encoding/json"
	"fmt"
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
	"github.com/dlmgo/dlm/strategy"
)

func ptr[T any](v T) *T { return &v }

func TestParseURL(t *testing.T) {
	c, err := config.ParseURL("single://u:secret@127.0.0.1:6379?ttl=10s&timeout=50ms&drift_factor=0.02")
	require.NoError(t, err)
	assert.Equal(t, config.Config{
		Strategy: "single", Addrs: []string{"127.0.0.1:6379"}, Username: "u", Password: "secret",
		TTL: config.Duration(10 * time.Second), Timeout: config.Duration(50 * time.Millisecond), DriftFactor: ptr(0.02),
	}, c)
	assert.Len(t, c.ManagerOptions(), 1, "the TTL")

	c, err = config.ParseURL("single://h:1?max_ttl=1m")
	require.NoError(t, err)
	assert.Equal(t, config.Duration(time.Minute), c.MaxTTL)
	for u, field := range map[string]string{
		"single://h:1?max_ttl=5s":        "max_ttl", // below the default TTL
		"single://h:1?ttl=2m&max_ttl=1m": "max_ttl",
		"single://h:1?max_ttl=25h":       "max_ttl",
		"single://h:1?max_ttl=-1s":       "max_ttl",
		"single://h:1?ttl=1s&max_ttl=1s": "",
	} {
		_, err := config.ParseURL(u)
		if field == "" {
			assert.NoError(t, err, u)
		} else {
			require.ErrorIs(t, err, dlm.ErrInvalid, u)
			assert.Contains(t, err.Error(), field, u)
		}
	}

	c, err = config.ParseURL("redlock://h1:6379,h2:6379,h3:6379?ttl=10s&renew=0.25&max_hold=1m")
	require.NoError(t, err)
	assert.Equal(t, config.Config{
		Strategy: "redlock", Addrs: []string{"h1:6379", "h2:6379", "h3:6379"},
		TTL: config.Duration(10 * time.Second), Renew: 0.25, MaxHold: config.Duration(time.Minute),
	}, c)
	assert.Len(t, c.ManagerOptions(), 2, "the TTL and auto-renewal")

	c, err = config.ParseURL("sentinel://s1:26379,s2:26379/mymaster?ack=2&replicas=0&wait_timeout=250ms&wait_aof=local")
	require.NoError(t, err)
	assert.Equal(t, config.Config{
		Strategy: "failover", Addrs: []string{"s1:26379", "s2:26379"}, Master: "mymaster",
		Ack: ptr(strategy.AckN(2)), Replicas: ptr(0), WaitTimeout: config.Duration(250 * time.Millisecond), WaitAOF: "local",
	}, c)

	// failover:// is the primary's address; a path there is an error that
	// points to sentinel://.
	c, err = config.ParseURL("failover://primary:6379?ack=majority")
	require.NoError(t, err)
	assert.Equal(t, config.Config{Strategy: "failover", Addrs: []string{"primary:6379"}, Ack: ptr(strategy.AckMajority())}, c)
	_, err = config.ParseURL("failover://s1:26379,s2:26379/mymaster?ack=2")
	assert.ErrorIs(t, err, dlm.ErrInvalid)
	assert.ErrorContains(t, err, "master: failover:// takes the primary's address and no path")
	assert.ErrorContains(t, err, "use sentinel://s1:26379,s2:26379/mymaster")

	// IPv6 addresses, which url.Parse alone refuses in a list.
	c, err = config.ParseURL("redlock://u:p@[::1]:6379,[::1]:6380,10.0.0.1:6379?ttl=10s")
	require.NoError(t, err)
	assert.Equal(t, config.Config{
		Strategy: "redlock", Addrs: []string{"[::1]:6379", "[::1]:6380", "10.0.0.1:6379"},
		Username: "u", Password: "p", TTL: config.Duration(10 * time.Second),
	}, c)
	c, err = config.ParseURL("sentinel://[fe80::1%25eth0]:26379,[::1]:26379/mymaster")
	require.NoError(t, err)
	assert.Equal(t, []string{"[fe80::1%25eth0]:26379", "[::1]:26379"}, c.Addrs)
}

// Passwords with '#', '%', ' ', '/', '?', '@' and ':' percent-encoded in
// the URL, for the servers and for the Sentinels.
func TestParseURLPasswords(t *testing.T) {
	for _, pw := range []string{"p#ss", "100%", "two words", "a/b", "why?", "a@b:c", "#%/? @:&=+"} {
		enc := url.UserPassword("u", pw).String() // u:…, percent-encoded
		c, err := config.ParseURL("redlock://" + enc + "@h1:6379,h2:6379?ttl=1s")
		require.NoError(t, err, pw)
		assert.Equal(t, "u", c.Username, pw)
		assert.Equal(t, pw, c.Password, pw)
		assert.Equal(t, []string{"h1:6379", "h2:6379"}, c.Addrs, pw)

		c, err = config.ParseURL("sentinel://" + enc + "@s1:26379/m?sentinel_username=su&sentinel_password=" + url.QueryEscape(pw))
		require.NoError(t, err, pw)
		assert.Equal(t, pw, c.Password, pw)
		assert.Equal(t, pw, c.SentinelPassword, pw)
		assert.Equal(t, "m", c.Master, pw)

		for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", c)} {
			assert.NotContains(t, s, pw)
			assert.NotContains(t, s, url.QueryEscape(pw))
			assert.NotContains(t, s, url.PathEscape(pw))
			assert.NotContains(t, s, strings.TrimPrefix(enc, "u:"))
		}
	}
	// A password alone, for servers with requirepass and no ACL user.
	c, err := config.ParseURL("single://:p%23ss@h:1")
	require.NoError(t, err)
	assert.Equal(t, "", c.Username)
	assert.Equal(t, "p#ss", c.Password)
}

// No error quotes a password, however the URL is malformed.
func TestParseURLErrorsHidePasswords(t *testing.T) {
	const pw = "Sekr1t"
	for _, u := range []string{
		"single://u:" + pw + "/x@h:1",                      // a raw '/': the path would start in the password
		"single://u:" + pw + "?x@h:1",                      // a raw '?'
		"single://u:" + pw + "?ttl=1s@h:1",                 // a raw '?' followed by what looks like a parameter
		"single://u:" + pw + "#x@h:1",                      // a raw '#'
		"single://u:" + pw + "%zz@h:1",                     // a bad escape
		"single://u:%zz" + pw + "@h:1",                     // a bad escape first
		"single://%zz" + pw + ":x@h:1",                     // in the user name
		"single://u:" + pw + "@h:1?tll=1s",                 // an unknown parameter
		"single://u:" + pw + "@h:x",                        // a bad port
		"single://u:" + pw + "@h:1,h:2",                    // too many addresses
		"single://u:" + pw + "@h:1?ttl=ten",                // a bad value
		"redlock://u:" + pw + "@h:1,h:1",                   // an address twice
		"single://u:" + pw + "@h:1/m",                      // a path
		"failover://u:" + pw + "@h:1/m",                    // a path on failover://
		"sentinel://s:1/m?sentinel_password=" + pw + "%zz", // a bad escape in the query
		"sentinel://s:1/m?sentinel_password=" + pw + "&ack=most",
		"single://h:1?sentinel_password=" + pw,
		"nosuch://u:" + pw + "@h:1",
	} {
		_, err := config.ParseURL(u)
		require.Error(t, err, u)
		assert.ErrorIs(t, err, dlm.ErrInvalid, u)
		assert.NotContains(t, err.Error(), pw, u)
		assert.NotContains(t, err.Error(), pw[1:5], u)
	}
}

// Config → URL → Config and Config → JSON → Config give back the Config.
func TestConfigRoundTrip(t *testing.T) {
	for _, c := range []config.Config{
		{Strategy: "single", Addrs: []string{"127.0.0.1:6379"}},
		{Strategy: "single", Addrs: []string{"h:1"}, Username: "u", Password: "p@ss/w:rd", TTL: config.Duration(1500 * time.Millisecond),
			Timeout: config.Duration(time.Second), DriftFactor: ptr(0.0)},
		{Strategy: "single", Addrs: []string{"h:1"}, Username: "us er", Password: "#%/? @:&=+"},
		{Strategy: "redlock", Addrs: []string{"a:1", "b:2", "c:3"}, Renew: 0.3, MaxHold: config.Duration(time.Hour), DriftFactor: ptr(0.05)},
		{Strategy: "redlock", Addrs: []string{"a:1"}, Renew: 0.5},
		{Strategy: "failover", Addrs: []string{"s1:26379", "s2:26379", "s3:26379"}, Master: "mymaster", Password: "pw",
			Ack: ptr(strategy.AckNone()), Replicas: ptr(2), WaitTimeout: config.Duration(time.Second), WaitAOF: "local"},
		{Strategy: "failover", Addrs: []string{"primary:6379"}, Ack: ptr(strategy.AckN(3)), Replicas: ptr(0)},
		{Strategy: "failover", Addrs: []string{"s1:26379"}, Master: "m", SentinelUsername: "su", SentinelPassword: "s&cret=#%/? "},
		{Strategy: "failover", Addrs: []string{"s1:26379"}, Master: "my master"},
		{Strategy: "redlock", Addrs: []string{"[::1]:6379", "[::1]:6380", "127.0.0.1:6381"}},
	} {
		require.NoError(t, c.Validate(), c.URL())
		back, err := config.ParseURL(c.URL())
		require.NoError(t, err, c.URL())
		assert.Equal(t, c, back, c.URL())

		b, err := json.Marshal(c)
		require.NoError(t, err)
		back, err = config.ParseJSON(strings.NewReader(string(b)))
		require.NoError(t, err, string(b))
		assert.Equal(t, c, back, string(b))

		for _, pw := range []string{c.Password, c.SentinelPassword} {
			if pw != "" {
				assert.NotContains(t, c.String(), pw, "String redacts the passwords")
				assert.NotContains(t, c.String(), url.QueryEscape(pw), "String redacts the passwords")
				assert.NotContains(t, c.String(), url.PathEscape(pw), "String redacts the passwords")
			}
		}
	}
	c, err := config.ParseURL("sentinel://s1:26379/m?ack=all")
	require.NoError(t, err)
	assert.Equal(t, "sentinel://s1:26379/m?ack=all", c.URL())
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for url, field := range map[string]string{
		"single://h:1?tll=10s":                        `"tll": unknown parameter`,
		"single://h:1?ttl=ten":                        `ttl: "ten" is not a duration`,
		"single://h:1?ttl=-1s":                        "ttl",
		"single://h:1?ttl=25h":                        "ttl: 25h0m0s is above 24h0m0s",
		"single://h:1?timeout=-1s":                    "timeout",
		"single://h:1?drift_factor=0.9":               "drift_factor",
		"single://h:1?drift_factor=x":                 "drift_factor",
		"single://h:1?addrs=x":                        `"addrs"`,
		"single://h:1?password=x":                     `"password": unknown parameter`,
		"single://h:1?ttl=1s&ttl=2s":                  `ttl: given 2 times`,
		"single://h:1,h:2":                            "addrs",
		"nosuch://h:1":                                `unknown URL scheme "nosuch://"; one of single://, redlock://, sentinel://, failover://, cluster://, redis://, rediss://`,
		"h:1":                                         "strategy",
		"single://h:1,,h:2":                           "addrs",
		"single://h:1?ttl=10s&unknown=yes":            `"unknown"`,
		"single://h:1/m":                              "master: applies only to the failover strategy",
		"single://h:1?max_hold=1s":                    "max_hold: bounds auto-renewal: set renew too",
		"single://h:1?max_extensions=1":               `"max_extensions": unknown parameter`,
		"single://h:1?renew=1":                        "renew: 1 is not in (0, 1)",
		"single://h:1?renew=-0.1":                     "renew",
		"single://h:1?renew=x":                        `renew: "x" is not a number`,
		"redlock://h:1,h:2?ack=all":                   "ack: applies only to the failover strategy, not to redlock",
		"redlock://h:1,h:2?replicas=1":                "replicas: applies only to the failover strategy",
		"redlock://h:1,h:2?wait_timeout=1s":           "wait_timeout: applies only",
		"redlock://h:1,h:2?wait_aof=local":            "wait_aof: applies only",
		"redlock://h:1,h:2,h:1":                       "addrs: h:1 is given twice",
		"redlock://h:1?renew=0.3&max_hold=-1s":        "max_hold",
		"sentinel://s:1/m?ack=most":                   `ack policy "most"`,
		"sentinel://s:1/m?ack=0":                      `ack policy "0"`,
		"sentinel://s:1/m?replicas=-1":                "replicas",
		"sentinel://s:1/m?replicas=1.5":               "replicas: want an integer",
		"sentinel://s:1/m?wait_timeout=0.5ms":         "wait_timeout",
		"sentinel://s:1/m?wait_aof=yes":               "wait_aof",
		"sentinel://s:1/m?ack=none&wait_aof=replicas": "wait_aof",
		"sentinel://s:1/m?timeout=100ms":              "timeout: 100ms must exceed the wait timeout 100ms",
		"sentinel://s:1,s:2":                          "master: sentinel:// needs the master name",
		"failover://p:1,p:2":                          "addrs: failover without master",
		"failover://p:1/m":                            "master: failover:// takes the primary's address and no path",
		"failover://p:1?sentinel_password=x":          "sentinel_password: applies only through Sentinel",
		"redlock://h:1?sentinel_username=u":           "sentinel_username: applies only to the failover strategy",
		"redlock://[::1]:1,[::1:2,h:3":                `addrs: "[::1:2"`,
		"redlock://h:1,h:x,h:3":                       `addrs: "h:x"`,
		"single://h:1#frag":                           "URL: a '#'",
	} {
		_, err := config.ParseURL(url)
		require.Error(t, err, url)
		assert.ErrorIs(t, err, dlm.ErrInvalid, url)
		assert.Contains(t, err.Error(), field, url)
	}
	// What is valid next to the cases above.
	for _, url := range []string{
		"sentinel://s:1/m?timeout=200ms",
		"sentinel://s:1/m?ack=none&timeout=10ms",
		"sentinel://s:1/m?ack=none&wait_aof=local",
		"sentinel://s:1/m?sentinel_password=p@ss",
		"redlock://h:1",
		"single://h:1?renew=0.3",
	} {
		_, err := config.ParseURL(url)
		assert.NoError(t, err, url)
	}
}

func TestParseJSON(t *testing.T) {
	c, err := config.ParseJSON(strings.NewReader(`{"strategy":"failover","addrs":["s:1"],"master":"m","ack":"majority","replicas":2,"ttl":"2s"}`))
	require.NoError(t, err)
	assert.Equal(t, config.Config{Strategy: "failover", Addrs: []string{"s:1"}, Master: "m",
		Ack: ptr(strategy.AckMajority()), Replicas: ptr(2), TTL: config.Duration(2 * time.Second)}, c)

	for doc, field := range map[string]string{
		`{"strategy":"single","ttl":"2s","colour":"red"}`: `"colour": unknown field`,
		`{"strategy":"single","ttl":2}`:                   "ttl: want a duration string",
		`{"strategy":"single","ttl":"2"}`:                 `ttl: "2" is not a duration`,
		`{"strategy":"redblack"}`:                         "strategy",
		`{}`:                                              "strategy: missing",
		`{"strategy":"redlock","addrs":"a:1"}`:            "addrs: want a list of strings",
		`{"strategy":"redlock","renew":"0.3"}`:            "renew: want a number",
		`{"strategy":"redlock","max_extensions":3}`:       `"max_extensions": unknown field`,
		`{"strategy":"failover","replicas":"3"}`:          "replicas: want an integer",
		`{"strategy":"redlock","ack":"all"}`:              "ack: applies only to the failover strategy",
		`{"strategy":"failover","ack":"sometimes"}`:       `ack: ack policy "sometimes"`,
		`{"strategy":"single","max_hold":"forever"}`:      `max_hold: "forever" is not a duration`,
		`{"strategy":"single"} {"strategy":"single"}`:     "one JSON object",
		`["single"]`: "one JSON object",
	} {
		_, err := config.ParseJSON(strings.NewReader(doc))
		require.Error(t, err, doc)
		assert.ErrorIs(t, err, dlm.ErrInvalid, doc)
		assert.Contains(t, err.Error(), field, doc)
	}
}

func unreachableNodes(t *testing.T, n int) []driver.Node {
	var nodes []driver.Node
	for i := range n {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)})
		t.Cleanup(func() { _ = c.Close() })
		nodes = append(nodes, goredis.New(c))
	}
	return nodes
}

func TestNewStrategyNodeCounts(t *testing.T) {
	nodes := unreachableNodes(t, 3)
	for url, n := range map[string]int{"single://h:1": 1, "sentinel://s:1/m": 1, "failover://p:1": 1, "redlock://a:1,b:1,c:1": 3} {
		c, err := config.ParseURL(url)
		require.NoError(t, err)
		_, err = c.NewStrategy()
		assert.ErrorIs(t, err, dlm.ErrInvalid, "%s: no node", url)
		_, err = c.NewStrategy(nil)
		assert.ErrorIs(t, err, dlm.ErrInvalid, "%s: nil node", url)
		_, err = c.NewStrategy(nodes[:n]...)
		assert.NoError(t, err, url)
		if n == 1 {
			_, err = c.NewStrategy(nodes[:2]...)
			assert.ErrorIs(t, err, dlm.ErrInvalid, url)
			assert.ErrorContains(t, err, "nodes: ")
		}
	}
	c, _ := config.ParseURL("redlock://a:1,b:1")
	_, err := c.NewStrategy(nodes[0], nodes[0])
	assert.ErrorIs(t, err, dlm.ErrInvalid, "the same node twice")
	_, err = config.Config{Strategy: "redlock", Addrs: []string{"a:1"}}.NewStrategy(nodes[0])
	assert.NoError(t, err)
	_, err = config.Config{Strategy: "single", Addrs: []string{"a:1"}, MaxHold: config.Duration(time.Second)}.NewStrategy(nodes[0])
	assert.ErrorIs(t, err, dlm.ErrInvalid, "NewStrategy validates")
}

// No error quotes a user's input whole: an unknown parameter of 100,000
// characters, or such a value, comes back as its first bytes and its length.
func TestErrorsBoundTheirEchoes(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	for _, u := range []string{
		"single://h:1?" + long + "=1",
		"single://h:1?ttl=" + long,
		"single://h:1?db=" + long,
		"single://h:1?db=0." + strings.Repeat("0", 100_000) + "1",
		"single://h:1?tls=" + long,
		"sentinel://h:1/m?ack=" + long,
		"sentinel://h:1/m?wait_aof=" + long,
		"single://" + long,
		"single://h:1,h:1" + long,
		"redis://h:1/" + long,
		long + "://h:1",
		"cluster://h:1?strategy=" + long,
		"failover://h:1/" + long,
	} {
		_, err := config.ParseURL(u)
		require.ErrorIs(t, err, dlm.ErrInvalid, u[:40])
		assert.Less(t, len(err.Error()), 400, "%.40s…: %.300s", u, err)
	}
	for _, j := range []string{
		`{"` + long + `":1}`,
		`{"strategy":"` + long + `"}`,
		`{"strategy":"single","addrs":["h:1"],"ttl":"` + long + `"}`,
		`{"strategy":"single","addrs":["` + long + `"]}`,
	} {
		_, err := config.ParseJSON(strings.NewReader(j))
		require.ErrorIs(t, err, dlm.ErrInvalid, j[:40])
		assert.Less(t, len(err.Error()), 400, "%.40s…: %.300s", j, err)
	}
	_, err := config.ParseURL("single://h:1?" + long + "=1")
	assert.ErrorContains(t, err, `config: "`+strings.Repeat("x", 64)+`"…(100000 bytes): unknown parameter`)
}
