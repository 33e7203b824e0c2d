package valkeygo_test

import (
	"context"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm/conformance/harness"
	valkeynode "github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/nodekit"
)

// TestConformance runs the conformance suite on the driver as
// docs/drivers.md says a driver's author does: harness.Run starts a
// redis-server behind a fault proxy and checks every rule on nodes over
// new clients of the proxy's address. valkey-go connects when its client is
// made, so the servers that refuse connections are dialled with Dial,
// whose error stands for every call's (WithDial); WithSentinel checks
// Dial's way through Sentinel.
func TestConformance(t *testing.T) {
	t.Parallel() // the suite mostly waits: on stalled servers, deadlines, expiry
	harness.Run(t, func(t *testing.T, addr string) driver.Node {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return valkeynode.New(c)
	}, harness.WithDial(func(t *testing.T, addr string) (driver.Node, error) {
		return dial(t, nodekit.Endpoint{Addr: addr})
	}), harness.WithSentinel(func(t *testing.T, addrs []string, master string) (driver.Node, error) {
		return dial(t, nodekit.Endpoint{Sentinels: addrs, Master: master})
	}))
}

// dial is Dial, its client closed when t ends.
func dial(t *testing.T, ep nodekit.Endpoint) (driver.Node, error) {
	n, c, err := valkeynode.Dial(context.Background(), ep)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return n, err
}
