package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are PEM files made for one test: a certificate authority, a
// certificate for 127.0.0.1 and localhost that servers present (and use as
// clients of each other), and a client certificate, all signed by the CA.
type Certs struct {
	Dir                   string
	CA                    string // the CA's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// NewCerts makes a CA and its server and client certificates, valid from
// an hour ago for a day, in a temporary directory of t.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c := &Certs{Dir: t.TempDir()}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	c.ca, _ = x509.ParseCertificate(der)
	c.caKey = key
	c.CA = c.write(t, "ca.crt", "CERTIFICATE", der)
	c.ServerCert, c.ServerKey = c.Issue(t, "server", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	c.ClientCert, c.ClientKey = c.Issue(t, "client", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	return c
}

// Issue makes a certificate for 127.0.0.1 and localhost, fit for servers and
// clients, valid from notBefore to notAfter (in the past for an expired
// one), signed by the CA, and returns its file and its key's.
func (c *Certs) Issue(t testing.TB, name string, notBefore, notAfter time.Time) (cert, key string) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &k.PublicKey, c.caKey)
	if err != nil {
		t.Fatalf("redistest: certificate %s: %v", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return c.write(t, name+".crt", "CERTIFICATE", der), c.write(t, name+".key", "EC PRIVATE KEY", kder)
}

// ClientConfig returns a client configuration that trusts the CA and
// presents the client certificate.
func (c *Certs) ClientConfig() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(c.ca)
	cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		panic("redistest: client certificate: " + err.Error()) // made by NewCerts
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// serverArgs are the arguments that make a server or Sentinel speak TLS
// only, on port, with the server certificate, asking clients for theirs,
// and use TLS to its replicas, primary and Cluster peers.
func (c *Certs) serverArgs(port string) []string {
	return []string{"--port", "0", "--tls-port", port,
		"--tls-cert-file", c.ServerCert, "--tls-key-file", c.ServerKey, "--tls-ca-cert-file", c.CA,
		"--tls-auth-clients", "yes", "--tls-replication", "yes"}
}

func (c *Certs) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(c.Dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// StartTLS is Start for a server that speaks TLS only (no plain port),
// with the certificates of certs, requiring client certificates, and using
// TLS to its primary. Its Addr is the TLS port; Client and the other
// helpers of this package connect to it with certs.ClientConfig.
func StartTLS(t testing.TB, certs *Certs, args ...string) *Server {
	t.Helper()
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	return launch(t, &Server{bin: Binary(t, "redis-server"), dir: t.TempDir(), args: args, certs: certs})
}

// TLS returns the client configuration for s (with its CA and client
// certificate), or nil for a plain server.
func (s *Server) TLS() *tls.Config {
	if s.certs == nil {
		return nil
	}
	return s.certs.ClientConfig()
}
