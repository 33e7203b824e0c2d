package rueidis

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/dlmgo/dlm/nodekit"
)

// dialCtx is rueidis's DialCtxFn over nodekit.Dial: rueidis's net.Dialer
// (its timeout and keep-alive), TLS with the configuration rueidis passes
// (the servers' or the Sentinels'), plain when it is nil, with TLS problems
// reported as permanent errors.
func dialCtx(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	return nodekit.Dial(ctx, d, cfg, "tcp", addr)
}
