package dlm_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// busPublishes sums, over every node of cl, the publish messages sent over
// the cluster bus (ordinary and shard channels).
func busPublishes(t *testing.T, cl *redistest.Cluster) int {
	t.Helper()
	re := regexp.MustCompile(`cluster_stats_messages_publish(?:shard)?_sent:(\d+)`)
	n := 0
	nodes := append([]*redistest.Server(nil), cl.Masters...)
	for _, r := range cl.Replicas {
		nodes = append(nodes, r...)
	}
	for _, s := range nodes {
		info, err := s.Client(t).ClusterInfo(context.Background()).Result()
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(info, -1) {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

// On a Cluster, a release announces itself on its shard only: at most one
// cluster-bus message per release (the master's to its replica), with
// nobody waiting and with a waiter on every key, against one per other node
// with PUBLISH. A waiter (of another Manager: its own Manager's would be
// handed the lock) is woken by the release, not by polling.
func TestClusterReleaseStaysInItsShard(t *testing.T) {
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterReplicas(t, 1, 1, 1)
			m := newM(t, newSingle(t, tc.node(t, cl.Masters[0].Addr)), dlm.WithTTL(10*time.Minute))
			// other never polls within its two-minute wait: only the
			// release's notification can wake it.
			other := newM(t, newSingle(t, tc.node(t, cl.Masters[0].Addr)), dlm.WithRetryDelay(5*time.Minute, 10*time.Minute))
			ctx := context.Background()
			const n = 50

			before := busPublishes(t, cl)
			for i := range n {
				l, err := m.TryLock(ctx, fmt.Sprint("bus-idle-", i))
				require.NoError(t, err)
				require.NoError(t, l.Unlock(ctx))
			}
			idle := float64(busPublishes(t, cl)-before) / n

			router := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr}})
			defer router.Close()
			before = busPublishes(t, cl)
			var worst time.Duration
			for i := range n {
				key := fmt.Sprint("bus-waited-", i)
				l, err := m.TryLock(ctx, key)
				require.NoError(t, err)
				got := make(chan time.Time, 1)
				go func() {
					wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
					defer cancel()
					w, err := other.Lock(wctx, key)
					if err == nil {
						got <- time.Now()
						_ = w.Unlock(ctx)
					}
					close(got)
				}()
				waitSubscribed(t, cl, router, key, 20*time.Second)
				released := time.Now()
				require.NoError(t, l.Unlock(ctx))
				at, ok := <-got
				require.True(t, ok, "the waiter was woken by the release (no poll could have come within its wait)")
				worst = max(worst, at.Sub(released))
			}
			waited := float64(busPublishes(t, cl)-before) / n / 2 // two releases per key
			t.Logf("%s: cluster-bus publish messages per release: %.2f with nobody waiting, %.2f with a waiter (6 nodes); slowest hand-off %v",
				tc.name, idle, waited, worst.Round(time.Microsecond))
			assert.LessOrEqual(t, idle, 1.0)
			assert.LessOrEqual(t, waited, 1.0)
		})
	}
}

// waitSubscribed waits, up to within, until key's release channel has a
// subscriber on the master of its slot; if it never has, it fails with
// each live node's role and subscriber count.
func waitSubscribed(t *testing.T, cl *redistest.Cluster, router *redis.ClusterClient, key string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	lock, _ := strategy.Keys(key)
	subscribed := func() bool {
		m, err := router.MasterForKey(ctx, lock)
		if err == nil {
			var r []any
			r, err = m.Do(ctx, "PUBSUB", "SHARDNUMSUB", lock).Slice()
			if err == nil && len(r) == 2 && r[1] == int64(1) {
				return true
			}
		}
		router.ReloadState(ctx) // the slot may have moved, its master died
		return false
	}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if subscribed() {
			return
		}
	}
	var state []string
	nodes := append([]*redistest.Server(nil), cl.Masters...)
	for _, r := range cl.Replicas {
		nodes = append(nodes, r...)
	}
	for _, s := range nodes {
		c := s.Client(t)
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil {
			state = append(state, fmt.Sprintf("%s: %v", s.Addr, err))
			continue
		}
		subs, _ := c.Do(ctx, "PUBSUB", "SHARDNUMSUB", lock).Slice()
		state = append(state, fmt.Sprintf("%s: %v, subscribers %v", s.Addr, role[0], subs))
	}
	t.Fatalf("no subscriber to %s on its slot's master within %v; nodes: %s", lock, within, strings.Join(state, "; "))
}

// A waiter subscribed on a slot's master keeps hearing releases after the
// slot moves to another master: the server unsubscribes it, and the driver
// subscribes again on the new master. The holder is another Manager with
// its own client, so only the notification can wake the waiter early.
func TestClusterWaiterFollowsSlotMove(t *testing.T) {
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterReplicas(t, 0, 0)
			ctx := context.Background()
			key := "follows"
			lock, _ := strategy.Keys(key)
			slot, err := cl.Masters[0].Client(t).ClusterKeySlot(ctx, lock).Result()
			require.NoError(t, err)
			from, to := cl.Masters[0], cl.Masters[1]
			if slot >= 8192 {
				from, to = to, from
			}
			took, _ := handOff(t, cl, tc.node, key, func() {
				cl.MigrateSlot(t, int(slot), from, to, 10, 0)
			})
			t.Logf("%s: the waiter got the lock %v after the release on the slot's new master", tc.name, took.Round(time.Microsecond))
		})
	}
}

// A waiter keeps hearing releases after the master of its slot dies and
// its replica takes over: the driver subscribes again on the promoted
// replica soon after the promotion, and the next release there wakes the
// waiter at once.
func TestClusterWaiterFollowsFailover(t *testing.T) {
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterReplicas(t, 1, 1, 1) // a replica is promoted by a majority of masters
			ctx := context.Background()
			key := "failover-waiter"
			lock, _ := strategy.Keys(key)
			slot, err := cl.Masters[0].Client(t).ClusterKeySlot(ctx, lock).Result()
			require.NoError(t, err)
			n, shard := len(cl.Masters), 0
			for (shard+1)*16384/n <= int(slot) { // redistest splits the slots evenly
				shard++
			}
			took, resubscribed := handOff(t, cl, tc.node, key, func() {
				require.NoError(t, cl.Masters[shard].Client(t).Do(ctx, "WAIT", 1, 2000).Err())
				cl.KillMaster(t, shard)
			})
			t.Logf("%s: subscribed on the promoted replica %v after the master's kill; the waiter got the lock %v after the release there",
				tc.name, resubscribed.Round(time.Millisecond), took.Round(time.Microsecond))
		})
	}
}

// handOff has one Manager take key while another waits for it (a retry
// delay of 20s, so only a notification wakes it early), runs change, waits
// until the waiter is subscribed on the master that now serves key, has
// the holder release, and returns how long after the release the waiter
// got the lock, and how long after change returned it was subscribed again.
func handOff(t *testing.T, cl *redistest.Cluster, node func(testing.TB, string) driver.Node, key string, change func()) (took, resubscribed time.Duration) {
	t.Helper()
	ctx := context.Background()
	// No poll and no lease's end can wake the waiter within its two-minute
	// wait: a grant within it came from the release's notification.
	opts := []dlm.Option{dlm.WithTTL(10 * time.Minute), dlm.WithRetryDelay(5*time.Minute, 10*time.Minute)}
	holder := newM(t, newSingle(t, node(t, cl.Masters[0].Addr)), opts...)
	waiter := newM(t, newSingle(t, node(t, cl.Masters[0].Addr)), opts...)
	held, err := holder.TryLock(ctx, key)
	require.NoError(t, err)
	got := make(chan time.Time, 1)
	go func() {
		defer close(got)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if l, err := waiter.Lock(wctx, key); err == nil {
			got <- time.Now()
			_ = l.Unlock(ctx)
		}
	}()
	router := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[len(cl.Masters)-1].Addr}})
	defer router.Close()
	waitSubscribed(t, cl, router, key, 20*time.Second)
	change()
	changed := time.Now()
	// Again, where key now lives: a failover on a loaded machine can take
	// many node timeouts, and what is asserted is that the driver follows.
	waitSubscribed(t, cl, router, key, time.Minute)
	resubscribed = time.Since(changed)
	// The holder's client may meet the old master first: retry the release.
	deadline := time.Now().Add(20 * time.Second)
	for err = held.Unlock(ctx); err != nil && time.Now().Before(deadline); err = held.Unlock(ctx) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err)
	released := time.Now()
	at, ok := <-got
	require.True(t, ok, "the waiter was woken by the release (no poll could have come within its wait)")
	return at.Sub(released), resubscribed
}

// On a Cluster, an Unlock hands the lock to a waiter of its own Manager in
// the slot of each key: one Handoff call, the next fence, no release.
func TestClusterHandoff(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			s := &handoffCounting{Strategy: newSingle(t, tc.node(t, cl[0].Addr))}
			m := newM(t, s, dlm.WithTTL(10*time.Second))
			ctx := context.Background()
			const n = 10
			for i := range n {
				key := fmt.Sprint("cluster-handoff-", tc.name, i)
				held, err := m.TryLock(ctx, key)
				require.NoError(t, err)
				got := parkWaiter(t, ctx, s, m, key)
				require.NoError(t, held.Unlock(ctx))
				r := <-got
				require.NoError(t, r.err)
				assert.Equal(t, held.Fence()+1, r.l.Fence(), key)
				require.NoError(t, r.l.Unlock(ctx))
			}
			assert.Equal(t, int64(n), s.handoffs.Load(), "Handoff calls")
			assert.Equal(t, int64(n), s.releases.Load(), "Release calls: the waiters' only")
		})
	}
}
