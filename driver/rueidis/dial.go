package rueidis

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm/nodekit"
)

// Dial is a config.Dialer: a Node over rueidis.NewClient, a single-server
// client for a server, a Sentinel client (which checks the Sentinels'
// view every 5s besides following their events) for a primary found
// through Sentinel, and a Cluster client for a Cluster (which refreshes its
// slot map by itself on MOVED, CLUSTERDOWN and broken connections). rueidis
// connects at once: a server that cannot be reached yet is not an error
// (the client redials on use); Sentinels that cannot be are, and so are
// Cluster nodes none of which answers, or which are not in cluster mode.
func Dial(_ context.Context, ep nodekit.Endpoint) (driver.Node, io.Closer, error) {
	o := rueidis.ClientOption{InitAddress: []string{ep.Addr}, ForceSingleClient: true,
		Username: ep.Username, Password: ep.Password, DisableCache: true,
		SelectDB: ep.DB, TLSConfig: ep.TLS, DialCtxFn: dialCtx}
	switch {
	case ep.Cluster != nil:
		o.InitAddress, o.ForceSingleClient = ep.Cluster, false
	case ep.Master != "":
		o.InitAddress, o.ForceSingleClient = ep.Sentinels, false
		o.Sentinel = rueidis.SentinelOption{MasterSet: ep.Master, Username: ep.SentinelUsername,
			Password: ep.SentinelPassword, TLSConfig: ep.SentinelTLS, TopologyRefreshInterval: 5 * time.Second}
	}
	c, err := rueidis.NewClient(o) // a single-server client comes back, with the error, when the server is down
	if c == nil {
		return nil, nil, nodekit.UnknownMaster(replyErr(err), ep.Master, ep.Sentinels)
	}
	if ep.Cluster != nil && (err != nil || c.Mode() != rueidis.ClientModeCluster) {
		c.Close()
		if err == nil {
			err = fmt.Errorf("%w: rueidis: %s: not a Redis Cluster (cluster mode is off; use single:// or failover://)", driver.ErrInvalid, ep)
		}
		return nil, nil, err
	}
	return New(c), closer{c}, nil
}

type closer struct{ c rueidis.Client }

func (c closer) Close() error { c.c.Close(); return nil }
