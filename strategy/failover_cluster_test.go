package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	rueidislib "github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// On a Cluster whose shards have different replica counts, each shard's
// locks wait for that shard's replicas: no lock is refused, and none waits
// out the wait timeout, because of another shard's count.
func TestFailoverClusterShardsOwnReplicaCounts(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 1, 2)
	for name, node := range map[string]func(t *testing.T) driver.Node{
		"go-redis": func(t *testing.T) driver.Node {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr}, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return goredis.New(c)
		},
		"rueidis": func(t *testing.T) driver.Node {
			c, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{cl.Masters[0].Addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			return rueidis.New(c)
		},
	} {
		t.Run(name, func(t *testing.T) {
			// Long, so that half of it tells a call that waited it out from
			// one a loaded machine made slow.
			const waitTimeout = 4 * time.Second
			f := newFailover(t, node(t), strategy.WithAcks(strategy.AckAll()), strategy.WithWaitTimeout(waitTimeout))
			ctx := context.Background()
			// Keys alternate between the shards: a count carried over from
			// the other shard would be wrong on every call.
			var keys []string
			for i := 0; len(keys) < 30; i++ {
				k := fmt.Sprintf("%s-%d", name, i)
				if shard := clusterShard(t, cl, k); shard == len(keys)%2 {
					keys = append(keys, k)
				}
			}
			for round, op := range []string{"acquire", "extend"} {
				for _, k := range keys {
					start := time.Now()
					var err error
					if round == 0 {
						_, err = f.Acquire(ctx, k, "tok", 10*time.Second)
					} else {
						_, err = f.Extend(ctx, k, "tok", 10*time.Second)
					}
					var ack *strategy.AckError
					if errors.As(err, &ack) {
						t.Errorf("%s %q on shard %d: %v", op, k, clusterShard(t, cl, k), err)
						continue
					}
					require.NoError(t, err, "%s %q", op, k)
					assert.Less(t, time.Since(start), waitTimeout/2, "%s %q on shard %d waited for replicas it does not have", op, k, clusterShard(t, cl, k))
				}
			}
		})
	}
}

// clusterShard returns the index of the master that serves key's lock.
func clusterShard(t *testing.T, cl *redistest.Cluster, key string) int {
	slot, err := cl.Masters[0].Client(t).ClusterKeySlot(context.Background(), "dlm:{"+key+"}").Result()
	require.NoError(t, err)
	return int(slot) * len(cl.Masters) / 16384
}

// A replica that joins after the strategy learnt the count does not cost a
// refusal: the write and a wait for the new count are sent once more.
func TestFailoverReplicaJoins(t *testing.T) {
	primary, r1, r2 := redistest.Start(t), redistest.Start(t), redistest.Start(t)
	r1.ReplicaOf(t, primary)
	f := newFailover(t, goredis.New(ctxClient(t, primary.Addr)), strategy.WithAcks(strategy.AckAll()), strategy.WithWaitTimeout(time.Second))
	ctx := context.Background()
	_, err := f.Acquire(ctx, "joins", "a", 10*time.Second)
	require.NoError(t, err)
	r2.ReplicaOf(t, primary)
	waitConnectedReplicas(t, primary, 2)
	_, err = f.Extend(ctx, "joins", "a", 10*time.Second)
	assert.NoError(t, err, "extend right after a replica joined")
	_, err = f.Acquire(ctx, "joins-2", "b", 10*time.Second)
	assert.NoError(t, err, "acquire once the count is known")
	for _, r := range []*redistest.Server{r1, r2} {
		assert.Equal(t, "b", lockHolder(t, r.Client(t), "joins-2"), "every replica holds the lock")
	}
}

func waitConnectedReplicas(t *testing.T, s *redistest.Server, n int) {
	c := s.Client(t)
	require.Eventually(t, func() bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, fmt.Sprintf("connected_slaves:%d\r\n", n))
	}, 10*time.Second, 20*time.Millisecond)
}
