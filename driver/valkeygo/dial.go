package valkeygo

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm/nodekit"
)

// Dial is a config.Dialer: a Node over valkey.NewClient, a single-server
// client for a server, a Sentinel client (which checks the Sentinels'
// view every 5s besides following their events) for a primary found
// through Sentinel, and a Cluster client for a Cluster (which refreshes its
// slot map by itself on MOVED, CLUSTERDOWN and broken connections).
// valkey-go connects at once: a server that cannot be reached yet is not an
// error (the client redials on use); Sentinels that cannot be are (a master
// they do not know matches driver.ErrUnknownMaster), and so are Cluster nodes
// none of which answers, or which are not in cluster mode. TLS problems are
// permanent errors (nodekit.Dial).
func Dial(_ context.Context, ep nodekit.Endpoint) (driver.Node, io.Closer, error) {
	o := valkey.ClientOption{InitAddress: []string{ep.Addr}, ForceSingleClient: true,
		Username: ep.Username, Password: ep.Password, DisableCache: true,
		SelectDB: ep.DB, TLSConfig: ep.TLS, DialCtxFn: dialCtx}
	switch {
	case ep.Cluster != nil:
		o.InitAddress, o.ForceSingleClient = ep.Cluster, false
	case ep.Master != "":
		o.InitAddress, o.ForceSingleClient = ep.Sentinels, false
		o.Sentinel = valkey.SentinelOption{MasterSet: ep.Master, Username: ep.SentinelUsername,
			Password: ep.SentinelPassword, TLSConfig: ep.SentinelTLS, TopologyRefreshInterval: 5 * time.Second}
	}
	c, err := valkey.NewClient(o) // a single-server client comes back, with the error, when the server is down
	if c == nil {
		return nil, nil, nodekit.UnknownMaster(replyErr(err), ep.Master, ep.Sentinels)
	}
	if ep.Cluster != nil && (err != nil || c.Mode() != valkey.ClientModeCluster) {
		c.Close()
		if err == nil {
			err = fmt.Errorf("%w: valkeygo: %s: not a Redis Cluster (cluster mode is off; use single:// or failover://)", driver.ErrInvalid, ep)
		}
		return nil, nil, err
	}
	return New(c), closer{c}, nil
}

type closer struct{ c valkey.Client }

func (c closer) Close() error { c.c.Close(); return nil }

// dialCtx is valkey-go's DialCtxFn over nodekit.Dial: its net.Dialer (its
// timeout and keep-alive), TLS with the configuration valkey-go passes (the
// servers' or the Sentinels'), plain when it is nil.
func dialCtx(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	return nodekit.Dial(ctx, d, cfg, "tcp", addr)
}
