package goredis

import (
	"context"
	"net"
	"slices"
	"time"

	"github.com/dlmgo/dlm/nodekit"
)

// dialTimeout bounds each dial, as go-redis's DialTimeout does by default.
const dialTimeout = 5 * time.Second

// dialer returns the go-redis Dialer for ep: TLS with ep.TLS (nodekit.Dialer
// reports TLS problems as permanent errors). go-redis dials the Sentinels
// and the primary with the same function, so, for a primary found through
// Sentinel, the addresses of ep.Sentinels are dialled with ep.SentinelTLS
// and every other one with ep.TLS: a Sentinel that go-redis discovers by
// itself and that is not listed is dialled as the primary is.
func dialer(ep nodekit.Endpoint) func(ctx context.Context, network, addr string) (net.Conn, error) {
	server := nodekit.Dialer(ep.TLS, dialTimeout)
	if ep.Master == "" || ep.TLS == ep.SentinelTLS {
		return server
	}
	sentinel := nodekit.Dialer(ep.SentinelTLS, dialTimeout)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slices.Contains(ep.Sentinels, addr) {
			return sentinel(ctx, network, addr)
		}
		return server(ctx, network, addr)
	}
}
