package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Doctor on a real TLS server reports TLS in use and the expiry of the
// certificate the server presents (a warning within 30 days, a failure
// once expired), a plain client at a TLS port, and plain text to an
// address off loopback.
func TestDoctorTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	srv := redistest.StartTLS(t, certs, "--appendonly", "yes", "--appendfsync", "always")
	tlsURL := "single://" + srv.Addr + "?tls=true&tls_ca=" + certs.CA + "&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey
	reissue := func(name string, notBefore, notAfter time.Time) {
		cert, key := certs.Issue(t, name, notBefore, notAfter)
		require.NoError(t, srv.Client(t).Do(context.Background(), "CONFIG", "SET", "tls-cert-file", cert, "tls-key-file", key).Err())
	}

	// NewCerts' server certificate is valid for a day.
	code, out := runDLM(t, "doctor", "--url", tlsURL)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "warn TLS 1.3: the server's certificate expires in 2")
	assert.Contains(t, out, "ok   reachable")

	reissue("long", time.Now().Add(-time.Hour), time.Now().Add(90*24*time.Hour))
	code, out = runDLM(t, "doctor", "--url", tlsURL)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   TLS 1.3, the server's certificate valid until")
	assert.Contains(t, out, "(89 days)")
	assert.NotContains(t, out, "plain text")

	// A plain client at the TLS port is told so, not "authentication failed".
	code, out = runDLM(t, "doctor", "--url", "single://"+srv.Addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail TLS with "+srv.Addr+": the server speaks TLS and this client does not")
	assert.NotContains(t, out, "plain text") // loopback

	// dlm run over TLS.
	code, out = runDLM(t, "run", "--url", tlsURL, "--key", "tls-job", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "fence=1")

	reissue("expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	code, out = runDLM(t, "doctor", "--url", tlsURL)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail TLS: the server's certificate expired on")
	assert.NotContains(t, out, "reachable")
	// Under tls_insecure the connection works, and the expiry is a failure
	// that says how long ago, not "expires in -24h0m0s".
	code, out = runDLM(t, "doctor", "--url", "single://"+srv.Addr+"?tls=true&tls_insecure=true&tls_cert="+certs.ClientCert+"&tls_key="+certs.ClientKey)
	assert.Equal(t, 1, code, out)
	assert.Regexp(t, `fail TLS 1\.3: the server's certificate expired 24h\d+m0s ago \(`, out)
	assert.NotContains(t, out, "expires in -", out)
	assert.Contains(t, out, "ok   reachable", out)
	// dlm run gives up at once, saying why.
	code, out = runDLM(t, "run", "--url", tlsURL, "--key", "tls-job", "--wait", "1m", "--", "true")
	assert.NotEqual(t, 0, code, out)
	assert.Contains(t, out, "certificate has expired")

	// 192.0.2.1 (TEST-NET-1) is off loopback, and nothing answers there.
	code, out = runDLM(t, "doctor", "--timeout", "1s", "--url", "single://192.0.2.1:6379")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "warn plain text to a non-loopback address")
	code, out = runDLM(t, "doctor", "--timeout", "1s", "--url", "single://localhost:1")
	assert.Equal(t, 1, code, out)
	assert.NotContains(t, out, "plain text")
}

// Doctor through TLS Sentinels checks the Sentinels' certificates and
// the primary's and replica's.
func TestDoctorSentinelTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1, TLS: certs})
	files := "tls_ca=" + certs.CA + "&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey
	u := "sentinel://" + topo.Sentinels[0].Addr + "/" + topo.Master + "?tls=true&sentinel_tls=true&" + files
	code, out := runDLM(t, "doctor", "--url", u)
	assert.Equal(t, 1, code, out) // certificates valid for a day, one Sentinel, AOF off
	assert.Contains(t, out, "warn "+topo.Sentinels[0].Addr+": TLS 1.3: the server's certificate expires in")
	assert.Contains(t, out, "ok   "+topo.Sentinels[0].Addr+": primary "+topo.Primary.Addr)
	assert.Equal(t, 3, strings.Count(out, "TLS 1.3: the server's certificate expires in"), out) // Sentinel, primary, replica
	assert.Contains(t, out, topo.Replicas[0].Addr+" (replica)")
	assert.NotContains(t, out, "\n  fail ")

	// The Sentinels' TLS is their own: without sentinel_tls the doctor
	// talks plain text to them and is told they speak TLS.
	code, out = runDLM(t, "doctor", "--url", "sentinel://"+topo.Sentinels[0].Addr+"/"+topo.Master+"?tls=true&"+files)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "the server speaks TLS and this client does not")
	assert.Contains(t, out, "check sentinel_tls")
}

// Doctor on a Cluster over TLS finds the nodes (their TLS ports) and checks
// each one's certificate.
func TestDoctorClusterTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	cl := redistest.StartClusterTLS(t, certs, 0, 0, 0)
	u := "cluster://" + cl.Masters[0].Addr + "?tls=true&tls_ca=" + certs.CA + "&tls_cert=" + certs.ClientCert + "&tls_key=" + certs.ClientKey
	code, out := runDLM(t, "doctor", "--url", u)
	assert.Equal(t, 1, code, out) // certificates valid for a day, AOF off
	assert.Contains(t, out, "ok   "+cl.Masters[0].Addr+": 3 node(s) known")
	assert.Equal(t, 3, strings.Count(out, "TLS 1.3: the server's certificate expires in"), out)
	assert.Equal(t, 3, strings.Count(out, "ok   cluster_state ok"), out)
	assert.NotContains(t, out, "\n  fail ")
}

// tls=true against a plain server's port: dlm run and dlm doctor say so,
// naming TLS, over every driver, instead of waiting out --wait and saying
// "context deadline exceeded".
func TestTLSClientAtPlainPort(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	u := "single://" + srv.Addr + "?tls=true&tls_insecure=true"
	for _, d := range []string{"goredis", "redigo", "rueidis", "valkeygo"} {
		start := time.Now()
		code, out := runDLM(t, "run", "--driver", d, "--url", u, "--key", "k", "--wait", "50s", "--", "true")
		assert.Less(t, time.Since(start), 25*time.Second, "%s waited for --wait", d) // generous: it takes well under 2s
		assert.Equal(t, exitNotLocked, code, "%s: %s", d, out)
		assert.Contains(t, out, "TLS with "+srv.Addr+": the server does not speak TLS", d)
		assert.NotContains(t, out, "deadline exceeded", d)

		code, out = runDLM(t, "doctor", "--driver", d, "--url", u)
		assert.NotEqual(t, 0, code, "%s: %s", d, out)
		assert.Contains(t, out, "TLS with "+srv.Addr+": the server does not speak TLS", d)
		assert.NotContains(t, out, "deadline exceeded", d)
	}
}
