package config_test

import (
	"context"
	"fmt"
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
	"github.com/dlmgo/dlm/internal/redistest"
)

// The TLS fields, the database number and the redis:// forms parse, and
// bad combinations are refused at parse time with the field named.
func TestParseTLS(t *testing.T) {
	c, err := config.ParseURL("rediss://default:p%23%40%25w@cache.example.com:6380/2")
	require.NoError(t, err)
	assert.Equal(t, config.Config{Strategy: "single", Addrs: []string{"cache.example.com:6380"},
		Username: "default", Password: "p#@%w", DB: 2, TLS: true}, c)
	back, err := config.ParseURL(c.URL())
	require.NoError(t, err)
	assert.Equal(t, c, back, c.URL())

	c, err = config.ParseURL("redis://h:6379")
	require.NoError(t, err)
	assert.False(t, c.TLS)

	c, err = config.ParseURL("sentinel://s1:26379/m?tls=true&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_server_name=redis.internal&sentinel_tls=true&db=1")
	require.NoError(t, err)
	assert.Equal(t, config.Config{Strategy: "failover", Addrs: []string{"s1:26379"}, Master: "m", DB: 1,
		TLS: true, TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem", TLSServerName: "redis.internal", SentinelTLS: true}, c)
	back, err = config.ParseURL(c.URL())
	require.NoError(t, err)
	assert.Equal(t, c, back)

	j, err := config.ParseJSON(strings.NewReader(`{"strategy":"redlock","addrs":["a:1","b:1","c:1"],"tls":true,"tls_insecure":true,"db":4}`))
	require.NoError(t, err)
	assert.True(t, j.TLS && j.TLSInsecure)
	assert.Equal(t, 4, j.DB)

	for _, tc := range []struct{ url, field, says string }{
		{"single://h:1?tls=true&tls_cert=/c.pem", "tls_cert", "needs tls_key"},
		{"single://h:1?tls=true&tls_key=/k.pem", "tls_key", "needs tls_cert"},
		{"cluster://h:1,h:2?db=1", "db", "only database 0"},
		{"single://h:1?db=-1", "db", "negative"},
		{"single://h:1?db=2147483648", "db", "is above 2147483647"},
		{"redis://h:1/99999999999", "db", "is above 2147483647"},
		{"single://h:1?db=x", "db", `"x" is not a number`},
		{"single://h:1?db=1.5", "db", "want an integer"},
		{"single://h:1?tls_ca=/ca.pem", "tls_ca", "tls=true"},
		{"single://h:1?tls_insecure=true", "tls_insecure", "tls=true"},
		{"single://h:1?tls=true&tls_insecure=true&tls_ca=/ca.pem", "tls_insecure", "unused"},
		{"single://h:1?tls=true&tls_ciphers=x", `"tls_ciphers"`, "unknown parameter"},
		{"single://h:1?sentinel_tls=true", "sentinel_tls", "failover"},
		{"failover://h:1?sentinel_tls=true", "sentinel_tls", "through Sentinel"},
		{"rediss://h:1/x", "db", "database number"},
		{"redis://h:1/1?db=2", "db", "both"},
	} {
		_, err := config.ParseURL(tc.url)
		require.ErrorIs(t, err, dlm.ErrInvalid, tc.url)
		assert.Contains(t, err.Error(), "config: "+tc.field+": ", tc.url)
		assert.Contains(t, err.Error(), tc.says, tc.url)
	}
	_, err = config.ParseJSON(strings.NewReader(`{"strategy":"single","addrs":["h:1"],"tls":true,"tls_verify":false}`))
	require.ErrorIs(t, err, dlm.ErrInvalid)
	assert.Contains(t, err.Error(), `"tls_verify": unknown field`)
}

// Files that cannot be used are errors of Open, before anything is dialled.
func TestOpenTLSFiles(t *testing.T) {
	certs := redistest.NewCerts(t)
	dir := t.TempDir()
	for _, tc := range []struct{ query, field, says string }{
		{"tls_ca=" + dir + "/missing.pem", "tls_ca", "missing.pem: no such file"},
		{"tls_ca=" + certs.ServerKey, "tls_ca", "holds no PEM certificate"},
		{"tls_ca=" + certs.CA + "&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ServerKey, "tls_cert", "private key does not match"},
	} {
		dialled := false
		_, _, err := config.Open(context.Background(), "single://127.0.0.1:1?tls=true&"+tc.query,
			func(context.Context, config.Endpoint) (driver.Node, io.Closer, error) {
				dialled = true
				return nil, nil, nil
			})
		require.ErrorIs(t, err, dlm.ErrInvalid, tc.query)
		assert.Contains(t, err.Error(), "config: "+tc.field+": ", tc.query)
		assert.Contains(t, err.Error(), tc.says, tc.query)
		assert.False(t, dialled)
	}
}

// tlsCase is one column of the TLS matrix: what the client is given and
// whether lock and unlock must work.
type tlsCase struct {
	name  string
	query func(*redistest.Certs) string // the URL's TLS parameters
	ok    bool
	says  string // in the error when !ok
}

// TestTLSMatrix locks over TLS on a plain server, Redlock masters, a
// Sentinel set-up and a Cluster, each speaking TLS only and requiring client certificates, with
// every driver: with the right certificates a lock is taken and released;
// with a CA that did not sign the servers' certificates, with a plain
// client, and with the servers' certificates expired, Open or Lock fails at
// once with an error that says why and that dlm.Permanent reports
// permanent (Lock's context is still live when it returns).
func TestTLSMatrix(t *testing.T) {
	certs := redistest.NewCerts(t)
	wrongCA := redistest.NewCerts(t)
	mutual := func(c *redistest.Certs) string {
		return "tls=true&tls_ca=" + certs.CA + "&tls_cert=" + c.ClientCert + "&tls_key=" + c.ClientKey
	}
	good := tlsCase{name: "good", ok: true, query: func(*redistest.Certs) string { return mutual(certs) }}
	cases := []tlsCase{good,
		{name: "wrong-ca", says: "certificate signed by unknown authority", query: func(*redistest.Certs) string {
			return "tls=true&tls_ca=" + wrongCA.CA + "&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey
		}},
		{name: "plain-client", says: "the server speaks TLS and this client does not", query: func(*redistest.Certs) string { return "" }},
	}
	expired := tlsCase{name: "expired", says: "certificate has expired", query: func(*redistest.Certs) string { return mutual(certs) }}
	expCert, expKey := certs.Issue(t, "expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))

	type deployment struct {
		name    string
		url     func(query string) string
		servers []*redistest.Server // whose certificate expires
		drivers []int               // indexes in dialers
	}
	var deployments []deployment

	// A plain server, reached with an ACL user whose password needs
	// percent-encoding, in database 3.
	single := redistest.StartTLS(t, certs)
	admin := single.Client(t)
	require.NoError(t, admin.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">p#@%w", "~*", "&*", "+@all").Err())
	deployments = append(deployments, deployment{name: "server", servers: []*redistest.Server{single}, drivers: []int{0, 1, 2, 3},
		url: func(q string) string {
			return "single://locker:" + url.PathEscape("p#@%w") + "@" + single.Addr + "?db=3&" + q
		}})

	// Redlock over three independent TLS masters: a permanent failure on
	// every master makes the quorum's error permanent. The per-node
	// timeout is fixed and generous: the adaptive one (50ms and up) is
	// not the subject, and a loaded machine's TLS round trip crossed it
	// (a good case's release failed in CI).
	masters := []*redistest.Server{redistest.StartTLS(t, certs), redistest.StartTLS(t, certs), redistest.StartTLS(t, certs)}
	deployments = append(deployments, deployment{name: "redlock", servers: masters, drivers: []int{0, 1, 2, 3},
		url: func(q string) string {
			return "redlock://" + masters[0].Addr + "," + masters[1].Addr + "," + masters[2].Addr + "?timeout=3s&" + q
		}})

	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1, TLS: certs})
	deployments = append(deployments, deployment{name: "sentinel", servers: append([]*redistest.Server{topo.Primary}, topo.Replicas...), drivers: []int{0, 1, 2, 3},
		url: func(q string) string {
			sq := q // the Sentinels speak TLS as the servers do, unless q says
			if strings.HasPrefix(q, "tls=true") {
				sq = "sentinel_tls=true&" + q
			}
			return "sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + topo.Master + "?replicas=1&" + sq
		}})

	cl := redistest.StartClusterTLS(t, certs, 0, 0, 0)
	deployments = append(deployments, deployment{name: "cluster", servers: cl.Masters, drivers: []int{0, 2, 3},
		url: func(q string) string { return "cluster://" + cl.Masters[0].Addr + "?" + q }})

	for _, dep := range deployments {
		t.Run(dep.name, func(t *testing.T) {
			run := func(tc tlsCase) {
				for _, i := range dep.drivers {
					d := dialers[i]
					t.Run(d.name+"/"+tc.name, func(t *testing.T) {
						err := lockOverTLS(t, dep.url(tc.query(certs)), d.dial, dep.name+"-"+d.name)
						result := "ok"
						if err != nil {
							result = fmt.Sprintf("permanent=%v: %v", dlm.Permanent(err), err)
						}
						t.Logf("MATRIX %s %s %s: %s", dep.name, d.name, tc.name, result)
						if tc.ok {
							require.NoError(t, err)
							return
						}
						require.Error(t, err)
						assert.True(t, dlm.Permanent(err), "not permanent: %v", err)
						assert.Contains(t, err.Error(), tc.says)
					})
				}
			}
			for _, tc := range cases {
				run(tc)
			}
			if dep.name == "server" {
				clientCert := "&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey
				run(tlsCase{name: "server-name", ok: true, query: func(*redistest.Certs) string { return mutual(certs) + "&tls_server_name=localhost" }})
				run(tlsCase{name: "other-name", says: "not redis.example", query: func(*redistest.Certs) string { return mutual(certs) + "&tls_server_name=redis.example" }})
				run(tlsCase{name: "insecure", ok: true, query: func(*redistest.Certs) string { return "tls=true&tls_insecure=true" + clientCert }})
				run(tlsCase{name: "no-client-cert", says: "certificate required", query: func(*redistest.Certs) string { return "tls=true&tls_ca=" + certs.CA }})
			}
			if dep.name == "sentinel" {
				// The Sentinels' TLS is their own: right for them, missing
				// for the primary.
				run(tlsCase{name: "plain-primary", says: "the server speaks TLS and this client does not", query: func(*redistest.Certs) string {
					return "sentinel_tls=true" + strings.TrimPrefix(mutual(certs), "tls=true")
				}})
			}
			if dep.name == "server" {
				// The locks were in database 3, as the URL says.
				db3 := redis.NewClient(&redis.Options{Addr: single.Addr, TLSConfig: single.TLS(), DB: 3})
				defer db3.Close()
				for _, i := range dep.drivers {
					fence := fenceOf(dep.name + "-" + dialers[i].name)
					assert.Equal(t, int64(1), db3.Exists(context.Background(), fence).Val(), "fence counter in db 3")
					assert.Equal(t, int64(0), admin.Exists(context.Background(), fence).Val(), "fence counter in db 0")
				}
			}
			// Last: the servers' certificates expire (new connections see it).
			for _, s := range dep.servers {
				require.NoError(t, s.Client(t).Do(context.Background(), "CONFIG", "SET", "tls-cert-file", expCert, "tls-key-file", expKey).Err())
			}
			run(expired)
		})
	}
}

// lockOverTLS opens url with dial, takes key and releases it, and returns
// the first error. It fails t if Lock waited its context out: an error
// that must come at once came late.
func lockOverTLS(t *testing.T, u string, dial config.Dialer, key string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, closer, err := config.Open(ctx, u, dial)
	if err != nil {
		return err
	}
	defer closer.Close()
	l, err := m.Lock(ctx, key)
	require.NoError(t, ctx.Err(), "Lock waited until its context ended: %v", err)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// A TLS client at a plain server's port fails at once, with every driver,
// for one server and for Redlock masters (whose adaptive per-node timeout
// leaves each handshake well under a second): the servers never answer the
// handshake, and nodekit.Dial asks the port in plain text instead.
func TestTLSClientAtPlainPort(t *testing.T) {
	srv := redistest.Start(t)
	masters := redistest.StartN(t, 3)
	tlsQuery := "tls=true&tls_insecure=true"
	for _, u := range []string{
		"single://" + srv.Addr + "?" + tlsQuery,
		"redlock://" + masters[0].Addr + "," + masters[1].Addr + "," + masters[2].Addr + "?" + tlsQuery,
	} {
		for _, d := range dialers {
			err := lockOverTLS(t, u, d.dial, "plain-port-"+d.name)
			require.Error(t, err, "%s %s", d.name, u)
			assert.True(t, dlm.Permanent(err), "%s %s: not permanent: %v", d.name, u, err)
			assert.Contains(t, err.Error(), "the server does not speak TLS", "%s %s", d.name, u)
		}
	}
}
