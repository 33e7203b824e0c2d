package dlm_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// waitModes runs a benchmark with hand-offs (the strategy is a
// driver.Handoff, as every strategy of this module), with release
// notifications only (a strategy that is not), and with polling only (nor
// can its node notify), and reports the acquisition attempts per op, a
// hand-off counted as one (1 is perfect: no waiter woke for nothing).
func waitModes(b *testing.B, f func(b *testing.B, m *dlm.Manager)) {
	for _, mode := range []string{"handoff", "notify", "poll"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Start(b)
			var n driver.Node = goredis.New(ctxClient(b, srv.Addr))
			if mode == "poll" {
				n = plainNode{n}
			}
			if mode == "handoff" {
				hs := &handoffCounting{Strategy: newSingle(b, n)}
				f(b, newM(b, hs, dlm.WithTTL(10*time.Second)))
				b.ReportMetric(float64(hs.acquires.Load()+hs.handoffs.Load())/float64(b.N), "attempts/op")
				return
			}
			cs := &countingStrategy{Strategy: newSingle(b, n)}
			f(b, newM(b, cs, dlm.WithTTL(10*time.Second)))
			b.ReportMetric(float64(cs.acquires.Load())/float64(b.N), "attempts/op")
		})
	}
}

func reportQuantiles(b *testing.B, d []time.Duration, name string) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	q := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), name+"-p50-ms")
	b.ReportMetric(q(0.99), name+"-p99-ms")
	b.ReportMetric(q(1), name+"-max-ms")
}

// BenchmarkHandoff measures the hand-off to the first of 4 blocked waiters
// of one Manager (see handoff).
func BenchmarkHandoff(b *testing.B) {
	waitModes(b, func(b *testing.B, m *dlm.Manager) {
		handoff(b, func(int) *dlm.Manager { return m })
	})
}

// BenchmarkHandoffCluster is BenchmarkHandoff with each goroutine on a
// Manager and a client of its own, so that every hand-off is a release
// notification from the server (within one Manager an Unlock wakes the next
// waiter itself): on a Cluster of three masters and on one redis-server, in
// one run, without replicas and with one replica per master (replication
// takes its share of this machine's two cores on both sides), through each
// driver's Cluster client (shard channels) and its plain client (ordinary
// channels).
func BenchmarkHandoffCluster(b *testing.B) {
	for _, replicas := range []int{0, 1} {
		for _, tc := range clusterClients {
			name := fmt.Sprintf("%s/replicas=%d", tc.name, replicas)
			b.Run(name+"/standalone", func(b *testing.B) {
				srv := redistest.Start(b)
				for range replicas {
					redistest.Start(b).ReplicaOf(b, srv)
				}
				var n driver.Node // a go-redis ClusterClient needs a Cluster; rueidis finds out which it is
				handoff(b, func(i int) *dlm.Manager {
					if tc.name == "go-redis" {
						n = goredis.New(srv.Client(b))
					} else {
						n = tc.node(b, srv.Addr)
					}
					return newM(b, newSingle(b, n), dlm.WithTTL(10*time.Second))
				})
			})
			b.Run(name+"/cluster", func(b *testing.B) {
				cl := redistest.StartClusterReplicas(b, replicas, replicas, replicas)
				handoff(b, func(int) *dlm.Manager {
					return newM(b, newSingle(b, tc.node(b, cl.Masters[0].Addr)), dlm.WithTTL(10*time.Second))
				})
			})
		}
	}
}

// handoff has five goroutines take one key in turn, goroutine i through
// manager(i), each holding it 1ms (long enough for the other four to be
// parked); an op is one hand-off, timed from the holder's Unlock call to the
// next holder's Lock return.
func handoff(b *testing.B, manager func(i int) *dlm.Manager) {
	ctx := context.Background()
	var released atomic.Int64 // UnixNano of the last Unlock call; 0 before the first
	var count atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	ms := make([]*dlm.Manager, 5)
	for i := range ms {
		ms[i] = manager(i)
	}
	b.ResetTimer()
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := m.Lock(ctx, "handoff")
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				if r := released.Load(); r != 0 {
					mu.Lock()
					lat = append(lat, now.Sub(time.Unix(0, r)))
					mu.Unlock()
				}
				done := count.Add(1) > int64(b.N)
				time.Sleep(time.Millisecond)
				released.Store(time.Now().UnixNano())
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportQuantiles(b, lat, "handoff")
}

// BenchmarkContended16 has 16 goroutines take one key in turn, each holding
// it 1ms; an op is one acquisition, and the wait of each Lock call is
// reported. A perfect FIFO queue gives every call a wait of about 15 holds
// plus 15 hand-offs.
func BenchmarkContended16(b *testing.B) {
	waitModes(b, func(b *testing.B, m *dlm.Manager) {
		ctx := context.Background()
		var count atomic.Int64
		var mu sync.Mutex
		var waits []time.Duration
		var wg sync.WaitGroup
		b.ResetTimer()
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for count.Add(1) <= int64(b.N) {
					start := time.Now()
					l, err := m.Lock(ctx, "contended")
					if err != nil {
						b.Error(err)
						return
					}
					w := time.Since(start)
					mu.Lock()
					waits = append(waits, w)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		// Leave out the start-up, when all 16 arrive at once.
		if len(waits) > 32 {
			waits = waits[16:]
		}
		reportQuantiles(b, waits, "wait")
	})
}

// BenchmarkNotifyMechanism compares the two ways a server can wake a
// waiter, on raw go-redis connections: a PUBLISH from the release script
// (what dlm uses) and a client-side-caching invalidation (CLIENT TRACKING in
// BCAST mode on the lock prefix, redirected to a pub/sub connection). An op
// is one acquire-and-release cycle of a lock key (acquire script, release
// script); it reports the latency from sending the release to receiving the
// first message after it, and how many messages the waiter's connection
// received per cycle.
func BenchmarkNotifyMechanism(b *testing.B) {
	acquire := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 10000) redis.call('INCR', KEYS[2]) return 1`)
	releasePub := redis.NewScript(`redis.call('DEL', KEYS[1]) redis.call('PUBLISH', KEYS[1], 'released') return 1`)
	releaseDel := redis.NewScript(`redis.call('DEL', KEYS[1]) return 1`)
	for _, mode := range []string{"publish", "tracking"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Start(b)
			ctx := context.Background()
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			subc := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: "dlm-bench-sub", Protocol: 2})
			defer subc.Close()
			key, fence := "dlm:{bench}", "dlm:{bench}:fence"
			var ps *redis.PubSub
			release := releasePub
			if mode == "publish" {
				ps = subc.Subscribe(ctx, key)
			} else {
				release = releaseDel
				ps = subc.Subscribe(ctx, "__redis__:invalidate")
			}
			defer ps.Close()
			if _, err := ps.Receive(ctx); err != nil { // the confirmation
				b.Fatal(err)
			}
			var tracker *redis.Conn
			if mode == "tracking" {
				list, err := c.ClientList(ctx).Result()
				if err != nil {
					b.Fatal(err)
				}
				id := ""
				for _, line := range strings.Split(list, "\n") {
					if strings.Contains(line, "name=dlm-bench-sub") {
						id = strings.TrimPrefix(strings.Fields(line)[0], "id=")
					}
				}
				tracker = c.Conn()
				defer tracker.Close()
				if err := tracker.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id, "BCAST", "PREFIX", "dlm:").Err(); err != nil {
					b.Fatal(err)
				}
			}
			msgs := ps.Channel(redis.WithChannelSize(1 << 16))
			var lat []time.Duration
			received := 0
			drain := func() {
				for {
					select {
					case <-msgs:
						received++
					default:
						return
					}
				}
			}
			b.ResetTimer()
			for range b.N {
				if err := acquire.Run(ctx, c, []string{key, fence}, "tok").Err(); err != nil {
					b.Fatal(err)
				}
				time.Sleep(50 * time.Microsecond)
				drain()
				start := time.Now()
				if err := release.Run(ctx, c, []string{key}).Err(); err != nil {
					b.Fatal(err)
				}
				select {
				case <-msgs:
					received++
					lat = append(lat, time.Since(start))
				case <-time.After(time.Second):
					b.Fatal("no message within 1s of the release")
				}
			}
			time.Sleep(10 * time.Millisecond)
			drain()
			b.StopTimer()
			b.ReportMetric(float64(received)/float64(b.N), "msgs/cycle")
			reportQuantiles(b, lat, "wake")
		})
	}
}

// BenchmarkContended16Procs is BenchmarkContended16 with the 16 goroutines
// spread over 4 Managers, each with its own client and subscription
// connection, as 4 processes would be: the queue is FIFO only within a
// Manager, and the Managers' first waiters race for each release.
func BenchmarkContended16Procs(b *testing.B) {
	srv := redistest.Start(b)
	var ms []*dlm.Manager
	var cs []*countingStrategy
	for range 4 {
		st := &countingStrategy{Strategy: newSingle(b, goredis.New(ctxClient(b, srv.Addr)))}
		cs = append(cs, st)
		ms = append(ms, newM(b, st, dlm.WithTTL(10*time.Second)))
	}
	ctx := context.Background()
	var count atomic.Int64
	var mu sync.Mutex
	var waits []time.Duration
	var wins [4]int
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := ms[g%4]
			for count.Add(1) <= int64(b.N) {
				start := time.Now()
				l, err := m.Lock(ctx, "contended")
				if err != nil {
					b.Error(err)
					return
				}
				w := time.Since(start)
				mu.Lock()
				waits = append(waits, w)
				wins[g%4]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.Logf("acquisitions per Manager: %v", wins)
	var attempts int64
	for _, st := range cs {
		attempts += st.acquires.Load()
	}
	b.ReportMetric(float64(attempts)/float64(b.N), "attempts/op")
	if len(waits) > 32 {
		waits = waits[16:]
	}
	reportQuantiles(b, waits, "wait")
}
