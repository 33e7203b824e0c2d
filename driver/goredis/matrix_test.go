package goredis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// TestServerMatrix runs, on every server of the matrix (redistest.Builds:
// Redis 7.0.15, Valkey 8.0.1, Redis 6.0.16), through this driver: the node
// rules (conformance.RunNode under the harness, on servers of that
// build), the strategy rules and the lock family's over the single
// strategy and over Redlock on three servers of that build, and the plain
// lock's guarantees through Managers. It logs how long each server's run
// took (wall time, the waits for a parallel slot among it). A build that
// is not installed is skipped, or fails under DLM_REQUIRE_REDIS=1
// (./test.sh installs them: .ci/servers.sh).
//
// Its redis-7.0 run is also TestConformance's over clients with
// ContextTimeoutEnabled and Dial through Sentinel, and TestConformanceSingle's
// over such a client. Every run owns its servers, so the builds, and each
// build's three suites, run in parallel (bounded by -parallel, GOMAXPROCS
// by default): the suites mostly wait, on stalled servers, deadlines and
// expiry.
func TestServerMatrix(t *testing.T) {
	t.Parallel()
	for _, name := range redistest.Builds() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := redistest.Find(t, name)
			begin := time.Now()
			t.Cleanup(func() { t.Logf("%s: the run took %v", name, time.Since(begin).Round(time.Second)) })
			start := func(t *testing.T) *redistest.Server {
				s := redistest.StartBuild(t, b)
				checkBuild(t, s, name)
				return s
			}
			t.Run("Node", func(t *testing.T) {
				t.Parallel()
				harness.Run(t, func(t *testing.T, addr string) driver.Node {
					return goredis.New(matrixClient(t, addr))
				}, harness.Server(b.Bin, b.Env...), harness.WithSentinel(dialSentinel))
			})
			single := func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) }
			redlock := func(nodes []driver.Node) (driver.Strategy, error) {
				// A per-node timeout of 1s, as TestRedlockConformance says why.
				return strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
			}
			for _, tc := range []struct {
				name        string
				servers     int
				newStrategy func([]driver.Node) (driver.Strategy, error)
			}{{"Single", 1, single}, {"Redlock", 3, redlock}} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					var nodes []driver.Node
					var addrs []string
					for range tc.servers {
						s := start(t)
						nodes = append(nodes, goredis.New(matrixClient(t, s.Addr)))
						addrs = append(addrs, s.Addr)
					}
					topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return nodes }, Servers: addrs}
					conformance.RunStrategy(t, topology, tc.newStrategy)
					family.Run(t, topology.Nodes, tc.newStrategy)
					t.Run("Lock", func(t *testing.T) {
						// Managers of their own clients, as two processes have.
						manager := func() *dlm.Manager {
							var own []driver.Node
							for _, a := range addrs {
								own = append(own, goredis.New(matrixClient(t, a)))
							}
							s, err := tc.newStrategy(own)
							require.NoError(t, err)
							m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
							require.NoError(t, err)
							return m
						}
						lockGuarantees(t, manager(), manager())
					})
				})
			}
		})
	}
}

// matrixClient returns a go-redis client of addr, closed when t ends.
func matrixClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkBuild fails t unless s is the release the build's name says.
func checkBuild(t *testing.T, s *redistest.Server, name string) {
	t.Helper()
	info, err := s.Client(t).Info(context.Background(), "server").Result()
	require.NoError(t, err)
	want := map[string]string{
		redistest.Redis70:  "redis_version:7.0.",
		redistest.Redis60:  "redis_version:6.0.",
		redistest.Valkey80: "valkey_version:8.0.",
	}[name]
	require.Contains(t, info, want, "%s is not the server %s names", s.Addr, name)
}

// lockGuarantees checks the plain lock's guarantees with two Managers of
// one deployment: a lock excludes the other Manager until it is
// released, fences increase, an extension moves the lease forward, and
// Unlock ends the lock (a second Unlock, or an Extend after it, fails
// with dlm.ErrNotHeld).
func lockGuarantees(t *testing.T, a, b *dlm.Manager) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "matrix:" + strings.ReplaceAll(t.Name(), "/", ":")

	first, err := a.Lock(ctx, key)
	require.NoError(t, err)
	require.NoError(t, first.Context().Err(), "a fresh lock's context is live")
	_, err = b.TryLock(ctx, key)
	require.ErrorIs(t, err, dlm.ErrNotAcquired, "the other Manager is refused while the lock is held")

	until := first.Until()
	require.NoError(t, first.Extend(ctx, time.Minute))
	assert.True(t, first.Until().After(until), "the extension moved the lease forward")

	// b waits for the key and gets it once a releases it.
	got := make(chan *dlm.Lock, 1)
	waitErr := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, key)
		waitErr <- err
		got <- l
	}()
	require.NoError(t, first.Unlock(ctx))
	require.ErrorIs(t, first.Unlock(ctx), dlm.ErrNotHeld, "a second Unlock")
	require.ErrorIs(t, first.Extend(ctx, time.Minute), dlm.ErrNotHeld, "an Extend after Unlock")
	require.NoError(t, <-waitErr, "the waiting Manager gets the lock once it is released")
	second := <-got
	assert.Greater(t, second.Fence(), first.Fence(), "fences increase across acquisitions")
	assert.Error(t, first.Context().Err(), "an unlocked lock's context has ended")

	_, err = a.TryLock(ctx, key)
	require.ErrorIs(t, err, dlm.ErrNotAcquired, "now the first Manager is refused")
	require.NoError(t, second.Unlock(ctx))
	third, err := a.TryLock(ctx, key)
	require.NoError(t, err)
	assert.Greater(t, third.Fence(), second.Fence())
	require.NoError(t, third.Unlock(ctx))
}
