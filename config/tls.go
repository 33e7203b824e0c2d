package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"

	"github.com/dlmgo/dlm/internal/echo"
)

// validateTLS checks the TLS fields and DB without reading any file.
func (c Config) validateTLS() error {
	switch {
	case c.DB < 0:
		return badField("db", "%d is negative", c.DB)
	case c.DB > math.MaxInt32:
		return badField("db", "%d is above %d, the largest database number Redis takes (a server has databases 0 to its databases setting - 1, 16 by default)", c.DB, math.MaxInt32)
	case c.DB != 0 && c.Cluster:
		return badField("db", "a Redis Cluster has only database 0, got db=%d", c.DB)
	case c.SentinelTLS && c.Master == "":
		return badField("sentinel_tls", "applies only through Sentinel (set master)")
	case c.TLSCert != "" && c.TLSKey == "":
		return badField("tls_cert", "needs tls_key, the file of the certificate's private key")
	case c.TLSKey != "" && c.TLSCert == "":
		return badField("tls_key", "needs tls_cert, the file of the client certificate")
	case c.TLSInsecure && c.TLSCA != "":
		return badField("tls_insecure", "skips verifying the servers' certificates, so tls_ca would be unused; give one of them")
	}
	if !c.TLS && !c.SentinelTLS {
		for _, f := range []struct{ name, v string }{
			{"tls_ca", c.TLSCA}, {"tls_cert", c.TLSCert}, {"tls_key", c.TLSKey}, {"tls_server_name", c.TLSServerName},
		} {
			if f.v != "" {
				return badField(f.name, "applies only with tls=true")
			}
		}
		if c.TLSInsecure {
			return badField("tls_insecure", "applies only with tls=true")
		}
	}
	return nil
}

// pathDB reads the path of a redis:// or rediss:// URL, "" or a database
// number, which the db parameter must not give again.
func pathDB(path string, q url.Values) (int, error) {
	if path == "" {
		return 0, nil
	}
	if _, ok := q["db"]; ok {
		return 0, badField("db", "given both as the path and as a parameter")
	}
	n, err := strconv.Atoi(path)
	if err != nil {
		return 0, badField("db", "the path of a redis:// URL is the database number, got %s", echo.Quote(path))
	}
	return n, nil
}

// TLSConfig returns the client TLS configuration c describes, or nil when
// c.TLS is false: the CA file's certificates as the roots (the system's
// when TLSCA is empty), the client certificate, the server name and
// InsecureSkipVerify, TLS 1.2 at least. It reads the files: an unreadable
// file, one without a PEM certificate, or a certificate that does not match
// its key is an error matching dlm.ErrInvalid.
func (c Config) TLSConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	return c.buildTLS()
}

// SentinelTLSConfig is TLSConfig for the connections to the Sentinels: nil
// unless c.SentinelTLS is set.
func (c Config) SentinelTLSConfig() (*tls.Config, error) {
	if !c.SentinelTLS {
		return nil, nil
	}
	return c.buildTLS()
}

// buildTLS builds the configuration of the tls_* fields, whether TLS is on
// or not (the Sentinels may use it alone).
func (c Config) buildTLS() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName, InsecureSkipVerify: c.TLSInsecure}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, badField("tls_ca", "%v", unwrapPath(err))
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, badField("tls_ca", "%s holds no PEM certificate", c.TLSCA)
		}
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, badField("tls_cert", "with tls_key: %v", unwrapPath(err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// unwrapPath keeps the file name of a *os.PathError in its text.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	}
	return err
}
