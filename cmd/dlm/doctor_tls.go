package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/nodekit"
)

// certWarning is how long before its expiry the doctor warns about a
// server's certificate.
const certWarning = 30 * 24 * time.Hour

// checkTransport reports how the doctor reaches addr, a server of cfg:
// over TLS, with the expiry of the certificate the server presents (a
// warning within 30 days, a failure once expired or when it does not
// verify), or in plain text, which is a warning unless addr is a loopback
// address. It returns false when the TLS handshake failed, so that nothing
// more is asked of the server.
func checkTransport(ctx context.Context, cfg config.Config, addr string, r *report) bool {
	tc, err := cfg.TLSConfig()
	if err != nil {
		r.addf("fail", "TLS: %v", err)
		return false
	}
	return transport(ctx, tc, addr, "", r)
}

// checkSentinelTransport is checkTransport for a Sentinel of cfg, its
// findings prefixed with its address.
func checkSentinelTransport(ctx context.Context, cfg config.Config, addr string, r *report) bool {
	tc, err := cfg.SentinelTLSConfig()
	if err != nil {
		r.addf("fail", "%s: TLS: %v", addr, err)
		return false
	}
	return transport(ctx, tc, addr, addr+": ", r)
}

func transport(ctx context.Context, tc *tls.Config, addr, prefix string, r *report) bool {
	if tc == nil {
		if !loopback(ctx, addr) {
			r.addf("warn", "%splain text to a non-loopback address: the password and every lock cross the network unencrypted; use tls=true (docs/tls.md)", prefix)
		}
		return true
	}
	if tc.InsecureSkipVerify {
		r.addf("warn", "%stls_insecure: the server's certificate is not verified, so anyone in the path can pose as the server; for tests only, give tls_ca instead", prefix)
	}
	state, err := handshake(ctx, tc, addr)
	if err != nil {
		// Read the certificate without verifying it, to say what is wrong.
		insecure := tc.Clone()
		insecure.InsecureSkipVerify = true
		if st, ierr := handshake(ctx, insecure, addr); ierr == nil && time.Now().After(st.PeerCertificates[0].NotAfter) {
			r.addf("fail", "%sTLS: the server's certificate expired on %s UTC: every client refuses it; renew it", prefix, st.PeerCertificates[0].NotAfter.UTC().Format(time.DateTime))
			return false
		}
		var ua x509.UnknownAuthorityError
		if errors.As(err, &ua) {
			r.addf("fail", "%sTLS: %v: give the CA that signed the server's certificate as tls_ca", prefix, err)
		} else {
			r.addf("fail", "%sTLS: %v", prefix, err)
		}
		return false
	}
	leaf := state.PeerCertificates[0]
	left := time.Until(leaf.NotAfter)
	when := leaf.NotAfter.UTC().Format(time.DateTime)
	switch {
	case left <= 0: // only tls_insecure gets this far with it
		r.addf("fail", "%s%s: the server's certificate expired %s ago (%s UTC): every client that verifies it refuses it; renew it", prefix, tls.VersionName(state.Version), days(-left), when)
	case left < certWarning:
		r.addf("warn", "%s%s: the server's certificate expires in %s (%s UTC): renew it; clients refuse it from then on", prefix, tls.VersionName(state.Version), days(left), when)
	default:
		r.addf("ok", "%s%s, the server's certificate valid until %s UTC (%s)", prefix, tls.VersionName(state.Version), when, days(left))
	}
	return true
}

// handshake connects to addr over TLS with cfg and returns the
// connection's state.
func handshake(ctx context.Context, cfg *tls.Config, addr string) (tls.ConnectionState, error) {
	conn, err := nodekit.Dialer(cfg, time.Second)(ctx, "tcp", addr)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	if cs, ok := conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return cs.ConnectionState(), nil
	}
	return tls.ConnectionState{}, fmt.Errorf("no TLS connection state for %s", addr)
}

// days writes d in days, or in hours under two days.
func days(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	return d.Round(time.Minute).String()
}

// loopback reports whether every address addr's host names is a loopback
// one (a name that cannot be resolved is not).
func loopback(ctx context.Context, addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}
