package rueidis

import (
	"context"
	"io"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
)

// Dial is a config.Dialer: a Node over rueidis.NewClient, a single-server
// client for a server and a Sentinel client (which checks the Sentinels'
// view every 5s besides following their events) for a primary found
// through Sentinel. rueidis connects at once: a server that cannot be
// reached yet is not an error (the client redials on use); Sentinels that
// cannot be are.
func Dial(_ context.Context, ep config.Endpoint) (dlm.Node, io.Closer, error) {
	o := rueidis.ClientOption{InitAddress: []string{ep.Addr}, ForceSingleClient: true,
		Username: ep.Username, Password: ep.Password, DisableCache: true}
	if ep.Master != "" {
		o.InitAddress, o.ForceSingleClient = ep.Sentinels, false
		o.Sentinel = rueidis.SentinelOption{MasterSet: ep.Master, Username: ep.SentinelUsername,
			Password: ep.SentinelPassword, TopologyRefreshInterval: 5 * time.Second}
	}
	c, err := rueidis.NewClient(o) // a single-server client comes back, with the error, when the server is down
	if c == nil {
		return nil, nil, err
	}
	return New(c), closer{c}, nil
}

type closer struct{ c rueidis.Client }

func (c closer) Close() error { c.c.Close(); return nil }
