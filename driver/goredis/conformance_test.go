package goredis_test

import (
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
)

// TestConformance runs the conformance suite on the driver as
// docs/drivers.md says a driver's author does, and is the file to copy:
// harness.Run starts a redis-server behind a fault proxy and checks every
// rule on nodes over new clients of the proxy's address.
func TestConformance(t *testing.T) {
	t.Parallel() // the suite mostly waits: on stalled servers, deadlines, expiry
	harness.Run(t, func(t *testing.T, addr string) driver.Node {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	})
}
