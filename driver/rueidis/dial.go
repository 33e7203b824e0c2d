package rueidis

import (
	"context"
	"io"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
)

// Dial is a config.Dialer: a Node over rueidis.NewClient, a single-server
// client for a server and a Sentinel client for a primary found through
// Sentinel. rueidis connects at once: a server that cannot be reached yet
// is not an error (the client redials on use), Sentinels that cannot be
// are.
func Dial(_ context.Context, ep config.Endpoint) (dlm.Node, io.Closer, error) {
	o := rueidis.ClientOption{InitAddress: []string{ep.Addr}, ForceSingleClient: true,
		Username: ep.Username, Password: ep.Password, DisableCache: true}
	if ep.Master != "" {
		o.InitAddress, o.ForceSingleClient = ep.Sentinels, false
		o.Sentinel = rueidis.SentinelOption{MasterSet: ep.Master, Username: ep.SentinelUsername, Password: ep.SentinelPassword}
	}
	c, err := rueidis.NewClient(o)
	if err != nil && (c == nil || ep.Master != "") {
		if c != nil {
			c.Close()
		}
		return nil, nil, err
	}
	return New(c), closer{c}, nil
}

// closer closes a rueidis client, whose Close returns nothing.
type closer struct{ c rueidis.Client }

func (c closer) Close() error { c.c.Close(); return nil }
