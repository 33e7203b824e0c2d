package redigo_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/nodekit"
)

// TestConformance runs the conformance suite on the driver as
// docs/drivers.md says a driver's author does: harness.Run starts a
// redis-server behind a fault proxy and checks every rule on nodes over
// new pools of the proxy's address, and on Dial's way through Sentinel.
func TestConformance(t *testing.T) {
	t.Parallel() // the suite mostly waits: on stalled servers, deadlines, expiry
	harness.Run(t, func(t *testing.T, addr string) driver.Node { return newNode(t, addr) },
		harness.WithSentinel(func(t *testing.T, addrs []string, master string) (driver.Node, error) {
			n, c, err := redigo.Dial(context.Background(), nodekit.Endpoint{Sentinels: addrs, Master: master})
			if err == nil {
				t.Cleanup(func() { _ = c.Close() })
			}
			return n, err
		}))
}

// newNode returns a Node over a new pool to addr, named by the address.
func newNode(t testing.TB, addr string) *redigo.Node {
	return redigo.New(newPool(t, addr)).WithName(addr)
}

// newPool returns a pool to addr, closed when t ends.
func newPool(t testing.TB, addr string) *redis.Pool {
	p := &redis.Pool{
		MaxIdle:     64,
		IdleTimeout: time.Minute,
		// DialContext, not Dial: the pool passes the call's context only to
		// DialContext, so a Dial would ignore its deadline.
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(30*time.Second))
		},
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
