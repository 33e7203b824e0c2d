package dlm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	rueidislib "github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// One master of a Cluster frozen past the renewal: its locks may run out,
// but not one lock held on the other masters is lost. A renewal batch that
// spans masters keeps the replies that arrived.
func TestClusterStalledMasterCostsNoOtherLocks(t *testing.T) {
	servers := redistest.StartCluster(t, 3)
	// The freeze (2×TTL) must not fail the master over, nor the Cluster
	// down, for the next subtest: a node timeout far above it.
	for _, s := range servers {
		require.NoError(t, s.Client(t).ConfigSet(context.Background(), "cluster-node-timeout", "20000").Err())
	}
	// Where each key lives, asked of a client of its own.
	router := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr}})
	t.Cleanup(func() { _ = router.Close() })
	for _, tc := range []struct {
		name string
		node func(t *testing.T) driver.Node
	}{
		{"go-redis", func(t *testing.T) driver.Node {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr}})
			t.Cleanup(func() { _ = c.Close() })
			return goredis.New(c)
		}},
		{"go-redis ContextTimeoutEnabled", func(t *testing.T) driver.Node {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr}, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return goredis.New(c)
		}},
		{"rueidis", func(t *testing.T) driver.Node {
			c, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{servers[0].Addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			return rueidis.New(c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Renewals come every TTL/3: a loaded machine may delay one by a
			// second without a lease on a healthy master running out (at
			// 900ms one did, under two busy loops beside the race detector).
			const ttl = 2 * time.Second
			m := newM(t, newSingle(t, tc.node(t)), dlm.WithTTL(ttl), dlm.WithAutoRenew(1.0/3, time.Hour))
			ctx := context.Background()
			frozen := servers[2]
			var onFrozen, elsewhere []*dlm.Lock
			for i := range 60 {
				key := fmt.Sprintf("stall-%s-%d", tc.name, i)
				l, err := m.TryLock(ctx, key)
				require.NoError(t, err)
				master, err := router.MasterForKey(ctx, "dlm:{"+key+"}")
				require.NoError(t, err)
				if master.Options().Addr == frozen.Addr {
					onFrozen = append(onFrozen, l)
				} else {
					elsewhere = append(elsewhere, l)
				}
			}
			require.NotEmpty(t, onFrozen)
			require.NotEmpty(t, elsewhere)
			for _, l := range append(onFrozen, elsewhere...) {
				require.NoError(t, l.Extend(ctx, ttl)) // every master has the extend script, as after any renewal
			}
			frozen.Freeze(t)
			time.Sleep(2 * ttl) // past every lease the frozen master could have renewed
			frozen.Thaw(t)
			lost := 0
			for _, l := range elsewhere {
				if l.Context().Err() != nil {
					if lost == 0 {
						t.Logf("first lost: %v", context.Cause(l.Context()))
					}
					lost++
				}
			}
			assert.Zero(t, lost, "of %d locks on the healthy masters", len(elsewhere))
			for _, l := range onFrozen {
				assert.Error(t, l.Context().Err(), "a lock on the frozen master cannot have been renewed")
			}
			for _, l := range append(onFrozen, elsewhere...) {
				_ = l.Unlock(ctx)
			}
		})
	}
}
