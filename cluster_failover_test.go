package dlm_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
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

// clusterClients are the drivers with a Cluster client, built with the
// client's default options from one seed address.
var clusterClients = []struct {
	name string
	node func(t testing.TB, seed string) driver.Node
}{
	{"go-redis", func(t testing.TB, seed string) driver.Node {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{seed}}) // default options
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	}},
	{"rueidis", func(t testing.TB, seed string) driver.Node {
		c, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{seed}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return rueidis.New(c)
	}},
}

// A master of a Cluster with replicas killed while auto-renewed locks are
// held on every master, over clients built with their default options: not
// one lock held on another master is lost, and acquisitions in the dead
// master's slots succeed again soon after its replica took over (on a
// quiet machine about the node timeout plus 2s after the kill; the bound
// is loose, for a loaded one).
func TestClusterMasterFailoverCostsNoOtherLocks(t *testing.T) {
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterReplicas(t, 1, 1, 1)
			const ttl = 8 * time.Second
			m := newM(t, newSingle(t, tc.node(t, cl.Masters[0].Addr)), dlm.WithTTL(ttl), dlm.WithAutoRenew(1.0/3, time.Hour))
			ctx := context.Background()

			prefix := "failover-" + tc.name + "-"
			locks := make([]*dlm.Lock, 150)
			for i := range locks {
				l, err := m.TryLock(ctx, prefix+strconv.Itoa(i))
				require.NoError(t, err)
				locks[i] = l
			}
			const victimIndex = 1
			victim := cl.Masters[victimIndex]
			onVictim := locksOn(t, victim, prefix)
			var elsewhere, killed []*dlm.Lock
			for i, l := range locks {
				if onVictim[i] {
					killed = append(killed, l)
				} else {
					elsewhere = append(elsewhere, l)
				}
			}
			require.Greater(t, len(killed), 10)
			require.Greater(t, len(elsewhere), 50)
			// Three of the dead master's keys, released, probe its slots.
			var probes []string
			for _, l := range killed[:3] {
				probes = append(probes, l.Key())
				require.NoError(t, l.Unlock(ctx))
			}
			killed = killed[3:]
			require.NoError(t, victim.Client(t).Do(ctx, "WAIT", 1, 2000).Err(), "the replica has the releases")

			// When the replica takes over, to tell Redis' failover from the
			// client's following it.
			promoted := make(chan time.Duration, 1)
			var lastRole string // what ROLE last said, for a watch that saw no promotion
			rc := cl.Replicas[1][0].Client(t)
			cl.KillMaster(t, victimIndex)
			killedAt := time.Now()
			go func() {
				for time.Since(killedAt) < time.Minute {
					r, err := rc.Do(ctx, "ROLE").Slice()
					if err == nil && len(r) > 0 && r[0] == "master" {
						promoted <- time.Since(killedAt)
						return
					}
					lastRole = fmt.Sprintf("%v, %v", r, err)
					time.Sleep(10 * time.Millisecond)
				}
				promoted <- -1
			}()
		probing:
			for _, k := range probes {
				for {
					actx, cancel := context.WithTimeout(ctx, time.Second)
					l, err := m.TryLock(actx, k)
					cancel()
					if err == nil {
						require.NoError(t, l.Unlock(ctx))
						break
					}
					if time.Since(killedAt) > time.Minute {
						t.Errorf("no grant on the moved slots after %v: %v", time.Since(killedAt).Round(time.Millisecond), err)
						showCluster(t, cl, victim)
						break probing
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			granted := time.Since(killedAt)
			p := <-promoted
			if !t.Failed() {
				t.Logf("%s: the moved slots grant again %v after the kill; the replica was promoted after %v", tc.name,
					granted.Round(time.Millisecond), p.Round(time.Millisecond))
				require.Positive(t, p, "the replica was promoted; ROLE said last: %s", lastRole)
				// A client that waited for a periodic refresh (30s and
				// more) would miss this; a loaded machine does not.
				assert.LessOrEqual(t, granted-p, 15*time.Second, "the client followed the promotion")
			}

			// Past the point where a lease that was not renewed has run out.
			time.Sleep(time.Until(killedAt.Add(ttl + time.Second)))
			lost := func(ls []*dlm.Lock) (n int) {
				for _, l := range ls {
					if l.Context().Err() != nil {
						if n == 0 {
							t.Logf("first lost: %s: %v", l.Key(), context.Cause(l.Context()))
						}
						n++
					}
				}
				return n
			}
			lostElsewhere, lostKilled := lost(elsewhere), lost(killed)
			t.Logf("%s: lost %d of %d locks on the other masters, %d of %d on the killed one", tc.name,
				lostElsewhere, len(elsewhere), lostKilled, len(killed))
			assert.Zero(t, lostElsewhere, "locks lost on the masters that stayed up")
			for _, l := range locks {
				_ = l.Unlock(ctx)
			}
		})
	}
}

// showCluster logs what the nodes of cl other than dead say of the
// cluster, and their logs' tails, for a failed failover to be diagnosed.
func showCluster(t *testing.T, cl *redistest.Cluster, dead *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	for _, s := range append(slices.Clone(cl.Masters), slices.Concat(cl.Replicas...)...) {
		if s == dead {
			continue
		}
		c := s.Client(t)
		info, err := c.ClusterInfo(ctx).Result()
		nodes, _ := c.ClusterNodes(ctx).Result()
		t.Logf("%s: CLUSTER INFO (%v):\n%s\nCLUSTER NODES:\n%s\nlog:\n%s", s.Addr, err, info, nodes, s.LogTail())
	}
}

// locksOn returns the indexes of the locks named prefix+index that have a
// key on server s, found with SCAN whatever the key's format.
func locksOn(t *testing.T, s *redistest.Server, prefix string) map[int]bool {
	t.Helper()
	re := regexp.MustCompile(regexp.QuoteMeta(prefix) + `(\d+)`)
	out := map[int]bool{}
	iter := s.Client(t).Scan(context.Background(), 0, fmt.Sprintf("*%s*", prefix), 1000).Iterator()
	for iter.Next(context.Background()) {
		if m := re.FindStringSubmatch(iter.Val()); m != nil {
			i, _ := strconv.Atoi(m[1])
			out[i] = true
		}
	}
	require.NoError(t, iter.Err())
	return out
}
