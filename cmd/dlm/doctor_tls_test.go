package main

import (
	"context"
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
	assert.Contains(t, out, "warn TLS TLS 1.3: the server's certificate expires in 2")
	assert.Contains(t, out, "ok   reachable")

	reissue("long", time.Now().Add(-time.Hour), time.Now().Add(90*24*time.Hour))
	code, out = runDLM(t, "doctor", "--url", tlsURL)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   TLS TLS 1.3, the server's certificate valid until")
	assert.Contains(t, out, "(89 days)")
	assert.NotContains(t, out, "plain text")

	// A plain client at the TLS port is told so, not "authentication failed".
	code, out = runDLM(t, "doctor", "--url", "single://"+srv.Addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail TLS with "+srv.Addr+": the server speaks TLS and this client does not")
	assert.NotContains(t, out, "plain text") // loopback

	reissue("expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	code, out = runDLM(t, "doctor", "--url", tlsURL)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail TLS: the server's certificate expired on")
	assert.NotContains(t, out, "reachable")

	// 192.0.2.1 (TEST-NET-1) is off loopback, and nothing answers there.
	code, out = runDLM(t, "doctor", "--timeout", "1s", "--url", "single://192.0.2.1:6379")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "warn plain text to a non-loopback address")
	code, out = runDLM(t, "doctor", "--timeout", "1s", "--url", "single://localhost:1")
	assert.Equal(t, 1, code, out)
	assert.NotContains(t, out, "plain text")
}
