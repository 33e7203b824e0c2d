package redigo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm/nodekit"
)

// Dial is a config.Dialer: a Node over a redis.Pool whose connections go to
// the server, or, through Sentinels.Dial, to the primary of the moment. It
// does not connect; the pool does on first use. redigo has no Redis Cluster
// client: for a Cluster, Dial returns an error matching dlm.ErrInvalid.
func Dial(_ context.Context, ep nodekit.Endpoint) (driver.Node, io.Closer, error) {
	if ep.Cluster != nil {
		return nil, nil, fmt.Errorf("%w: redigo has no Redis Cluster client; dial %s with goredis.Dial, rueidis.Dial or valkeygo.Dial", driver.ErrInvalid, ep)
	}
	auth := []redis.DialOption{redis.DialUsername(ep.Username), redis.DialPassword(ep.Password),
		redis.DialDatabase(ep.DB), dialTLS(ep.TLS, 0)}
	dial := func(ctx context.Context) (redis.Conn, error) { return redis.DialContext(ctx, "tcp", ep.Addr, auth...) }
	if ep.Master != "" {
		dial = Sentinels{Addrs: ep.Sentinels, Master: ep.Master, DialOptions: []redis.DialOption{
			redis.DialUsername(ep.SentinelUsername), redis.DialPassword(ep.SentinelPassword),
			dialTLS(ep.SentinelTLS, time.Second)}}.Dial(auth...)
	}
	p := &redis.Pool{DialContext: dial, MaxIdle: 16, IdleTimeout: time.Minute}
	return New(p).WithName(ep.String()), p, nil
}
