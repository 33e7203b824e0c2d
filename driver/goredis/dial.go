package goredis

import (
	"context"
	"io"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/nodekit"
)

// Dial is a config.Dialer: a node over redis.NewClient for a server, over
// redis.NewFailoverClient for a primary found through Sentinel, or over
// redis.NewClusterClient for a Cluster. It does not connect; the client
// does on first use. The clients make one round trip per call and dial once
// per attempt (the strategies and the Manager retry), and the context's
// deadline bounds the socket. A Cluster client follows MOVED replies and,
// through the node, reloads the slot map when a master stops answering.
func Dial(_ context.Context, ep nodekit.Endpoint) (driver.Node, io.Closer, error) {
	if ep.Cluster != nil {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: ep.Cluster, Username: ep.Username, Password: ep.Password, Dialer: dialer(ep),
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		})
		return New(c), c, nil
	}
	if ep.Master != "" {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: ep.Master, SentinelAddrs: ep.Sentinels,
			Username: ep.Username, Password: ep.Password, DB: ep.DB, Dialer: dialer(ep),
			SentinelUsername: ep.SentinelUsername, SentinelPassword: ep.SentinelPassword,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		})
		n := newNode(c)
		n.name = "primary of " + ep.Master // go-redis names it "FailoverClient"
		n.master = ep.Master
		return n, c, nil
	}
	c := redis.NewClient(&redis.Options{
		Addr: ep.Addr, Username: ep.Username, Password: ep.Password, DB: ep.DB, Dialer: dialer(ep),
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
	})
	return New(c), c, nil
}
