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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func TestNewFailoverRejects(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	node := goredis.New(c)

	_, err := strategy.NewFailover(nil)
	assert.ErrorIs(t, err, dlm.ErrInvalid)

	for name, opts := range map[string][]strategy.Option{
		"AckN(0)":             {strategy.WithAcks(strategy.AckN(0))},
		"wait timeout 0":      {strategy.WithWaitTimeout(0)},
		"negative replicas":   {strategy.WithReplicas(-1)},
		"timeout below wait":  {strategy.WithTimeout(50 * time.Millisecond)},
		"AOF waiting nothing": {strategy.WithAcks(strategy.AckNone()), strategy.WithWaitAOF(false)},
		"nil option":          {nil},
	} {
		_, err = strategy.NewFailover(node, opts...)
		assert.ErrorIs(t, err, dlm.ErrInvalid, name)
	}
	_, err = strategy.NewSingle(node, strategy.WithAcks(strategy.AckAll()))
	assert.ErrorIs(t, err, dlm.ErrInvalid, "a failover option given to NewSingle")
	assert.ErrorContains(t, err, "only to NewFailover")

	f, err := strategy.NewFailover(node, strategy.WithWaitTimeout(200*time.Millisecond))
	require.NoError(t, err)
	_, err = f.Acquire(context.Background(), "k", "tok", 150*time.Millisecond)
	assert.ErrorIs(t, err, dlm.ErrInvalid, "a TTL within the wait timeout")

	for _, s := range []string{"all", "majority", "none", "3"} {
		var p strategy.AckPolicy
		require.NoError(t, p.UnmarshalText([]byte(s)))
		assert.Equal(t, s, p.String())
	}
	for _, s := range []string{"", "0", "-1", "most"} {
		var p strategy.AckPolicy
		assert.ErrorIs(t, p.UnmarshalText([]byte(s)), dlm.ErrInvalid, s)
	}
}

// otherConnWaiter is a deliberately wrong RunWait: it runs the scripts
// through the node and sends WAIT on a connection of its own. WAIT there
// counts acknowledgements of that connection's earlier writes, not of the
// scripts'.
type otherConnWaiter struct {
	driver.Node
	other *redis.Client
}

func (o otherConnWaiter) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	o.Run(ctx, calls)
	n, err := o.other.Wait(ctx, w.Replicas, w.Timeout).Result()
	return driver.Acks{Replicas: int(n)}, err
}

func newFailover(t *testing.T, n driver.Node, opts ...strategy.Option) *strategy.Failover {
	t.Helper()
	f, err := strategy.NewFailover(n, opts...)
	require.NoError(t, err)
	return f.(*strategy.Failover)
}

func freeze(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		s.Freeze(t)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Thaw(t) // harmless when already thawed
		}
	})
}

func thaw(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		s.Thaw(t)
	}
}

// TestFailoverReplicated runs on one primary with two replicas (no Sentinel).
func TestFailoverReplicated(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{})
	primary := topo.Primary.Client(t)
	node := goredis.New(primary)
	ctx := context.Background()
	const ttl = 10 * time.Second

	t.Run("Probe reports the server and whether it has WAITAOF", func(t *testing.T) {
		f := newFailover(t, node)
		info, err := f.Probe(ctx)
		require.NoError(t, err)
		server, err := primary.Info(ctx, "server").Result()
		require.NoError(t, err)
		assert.Contains(t, server, "redis_version:"+info.Version+"\r\n")
		assert.True(t, info.Primary)
		assert.Equal(t, 2, info.Replicas)
		assert.False(t, info.AOF)
		var major, minor int
		_, err = fmt.Sscanf(info.Version, "%d.%d", &major, &minor)
		require.NoError(t, err)
		assert.Equal(t, major > 7 || major == 7 && minor >= 2, info.WaitAOF)

		aof := newFailover(t, node, strategy.WithWaitAOF(false))
		_, err = aof.Acquire(ctx, "probe-aof", "tok", ttl)
		if info.WaitAOF {
			t.Logf("Redis %s offers WAITAOF; acquisition with it: %v", info.Version, err)
			return
		}
		require.Error(t, err)
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorIs(t, err, dlm.ErrInvalid, "the server cannot do what was configured")
		assert.ErrorContains(t, err, "Redis "+info.Version+", which has no WAITAOF")
		n, err := primary.Exists(ctx, "dlm:{probe-aof}").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing written when the server cannot WAITAOF")
	})

	t.Run("AckAll grants once both replicas hold the lock and its fence", func(t *testing.T) {
		f := newFailover(t, node)
		lease, err := f.Acquire(ctx, "all", "a", ttl)
		require.NoError(t, err)
		for _, r := range topo.Replicas {
			c := r.Client(t)
			lock, fence := strategy.Keys("all")
			assert.Equal(t, fmt.Sprint(lease.Fence, ":a"), c.Get(ctx, lock).Val(), "lock on replica %s", r.Addr)
			assert.Equal(t, fmt.Sprint(lease.Fence), c.Get(ctx, fence).Val(), "fence counter on replica %s", r.Addr)
		}
		_, err = f.Acquire(ctx, "all", "b", ttl)
		var held *strategy.HeldError
		assert.ErrorAs(t, err, &held)
		again, err := f.Acquire(ctx, "all", "a", ttl)
		require.NoError(t, err, "the holder may acquire again")
		assert.Equal(t, lease.Fence, again.Fence)
		ext, err := f.Extend(ctx, "all", "a", ttl)
		require.NoError(t, err)
		assert.Equal(t, lease.Fence, ext.Fence)
		require.NoError(t, f.Release(ctx, "all", "a"))
		assert.ErrorIs(t, f.Release(ctx, "all", "a"), dlm.ErrNotHeld)
		next, err := f.Acquire(ctx, "all", "b", ttl)
		require.NoError(t, err)
		assert.Greater(t, next.Fence, lease.Fence)
	})

	t.Run("policies count acknowledgements against the replicas", func(t *testing.T) {
		for i, tc := range []struct {
			opts          []strategy.Option
			acked, wanted int // wanted 0: granted
		}{
			{opts: []strategy.Option{strategy.WithAcks(strategy.AckMajority())}},
			{opts: []strategy.Option{strategy.WithAcks(strategy.AckN(2))}},
			{opts: []strategy.Option{strategy.WithAcks(strategy.AckN(3))}, acked: 2, wanted: 3},
			{opts: []strategy.Option{strategy.WithReplicas(3)}, acked: 2, wanted: 3},
		} {
			f := newFailover(t, node, append(tc.opts, strategy.WithWaitTimeout(50*time.Millisecond))...)
			key := fmt.Sprintf("policy-%d", i)
			_, err := f.Acquire(ctx, key, "tok", ttl)
			if tc.wanted == 0 {
				assert.NoError(t, err)
				continue
			}
			var ack *strategy.AckError
			require.ErrorAs(t, err, &ack)
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.Equal(t, tc.acked, ack.Acked)
			assert.Equal(t, tc.wanted, ack.Wanted)
			assert.Equal(t, 2, ack.Connected)
			assert.ErrorContains(t, err, fmt.Sprintf("%d of %d replicas acknowledged", tc.acked, tc.wanted))
			assert.Eventually(t, func() bool { return primary.Exists(ctx, "dlm:{"+key+"}").Val() == 0 }, time.Second, 5*time.Millisecond, "rolled back")
		}
	})

	t.Run("frozen replicas: refused and rolled back unless the policy is none", func(t *testing.T) {
		freeze(t, topo.Replicas...)
		for _, tc := range []struct {
			policy        strategy.AckPolicy
			acked, wanted int
		}{
			{strategy.AckAll(), 0, 2},
			{strategy.AckMajority(), 0, 2},
			{strategy.AckN(1), 0, 1},
		} {
			f := newFailover(t, node, strategy.WithAcks(tc.policy), strategy.WithWaitTimeout(50*time.Millisecond))
			key := "frozen-" + tc.policy.String()
			_, err := f.Acquire(ctx, key, "tok", ttl)
			var ack *strategy.AckError
			require.ErrorAs(t, err, &ack, tc.policy.String())
			assert.ErrorIs(t, err, dlm.ErrNotAcquired)
			assert.Equal(t, tc.acked, ack.Acked)
			assert.Equal(t, tc.wanted, ack.Wanted)
			assert.ErrorContains(t, err, fmt.Sprintf("%d of %d replicas acknowledged", tc.acked, tc.wanted))
			assert.Eventually(t, func() bool { return primary.Exists(ctx, "dlm:{"+key+"}").Val() == 0 }, time.Second, 5*time.Millisecond, "rolled back on the primary")
		}
		none := newFailover(t, node, strategy.WithAcks(strategy.AckNone()))
		_, err := none.Acquire(ctx, "frozen-none", "tok", ttl)
		assert.NoError(t, err, "policy none grants without any replica")

		// Waiting until the deadline: the error still says why each attempt
		// was refused, not only that time ran out.
		// A client that puts the deadline on its socket: the last attempt ends
		// with an i/o timeout, not the context's error.
		onWire := redis.NewClient(&redis.Options{Addr: topo.Primary.Addr, ContextTimeoutEnabled: true})
		defer onWire.Close()
		m, err := dlm.New(newFailover(t, goredis.New(onWire), strategy.WithWaitTimeout(50*time.Millisecond)), dlm.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
		_, err = m.Lock(wctx, "frozen-wait")
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var ack *strategy.AckError
		assert.ErrorAs(t, err, &ack, "the refusal seen, not only the deadline: %v", err)
		thaw(t, topo.Replicas...)
	})

	t.Run("WAIT on another connection is a false positive; the driver sends it on the script's", func(t *testing.T) {
		// A pooled connection whose own last write (or, on Redis 7.0, last
		// command of any kind) the replicas already acknowledged: the usual
		// state of any connection but the one the script just wrote on.
		other := redis.NewClient(&redis.Options{Addr: topo.Primary.Addr, PoolSize: 1})
		defer other.Close()
		require.Equal(t, int64(2), other.Wait(ctx, 2, time.Second).Val(), "replicas caught up with the other connection")
		wrong := newFailover(t, otherConnWaiter{Node: node, other: other}, strategy.WithWaitTimeout(50*time.Millisecond))
		right := newFailover(t, node, strategy.WithWaitTimeout(50*time.Millisecond))
		_, err := right.Probe(ctx)
		require.NoError(t, err)
		freeze(t, topo.Replicas...)

		_, err = right.Acquire(ctx, "fp-right", "tok", ttl)
		var ack *strategy.AckError
		require.ErrorAs(t, err, &ack, "the driver's WAIT must follow the script on its connection")
		assert.Zero(t, ack.Acked)

		// Same frozen replicas, WAIT sent elsewhere: both replicas "acknowledge"
		// at once, so the lock is granted though no replica has it.
		lease, err := wrong.Acquire(ctx, "fp-wrong", "tok", ttl)
		require.NoError(t, err, "the wrong implementation reports a false positive")
		assert.NotZero(t, lease.Fence)
		thaw(t, topo.Replicas...)
	})

	t.Run("a replica answering READONLY is not acquired", func(t *testing.T) {
		replica := goredis.New(topo.Replicas[0].Client(t))
		// Policy none sends the script straight away: the replica refuses the write.
		_, err := newFailover(t, replica, strategy.WithAcks(strategy.AckNone())).Acquire(ctx, "ro", "tok", ttl)
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorContains(t, err, "READONLY")
		// Other policies probe first and find a replica.
		_, err = newFailover(t, replica).Acquire(ctx, "ro", "tok", ttl)
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorContains(t, err, "replica")
	})

	t.Run("an extension without acknowledgements is not trusted; the old lease stands", func(t *testing.T) {
		f := newFailover(t, node, strategy.WithWaitTimeout(50*time.Millisecond))
		lease, err := f.Acquire(ctx, "ext", "tok", ttl)
		require.NoError(t, err)
		freeze(t, topo.Replicas...)
		_, err = f.Extend(ctx, "ext", "tok", ttl)
		var ack *strategy.AckError
		require.ErrorAs(t, err, &ack)
		assert.Equal(t, "extend", ack.Op)
		assert.NotErrorIs(t, err, dlm.ErrNotHeld, "the lock is still held")
		assert.NotErrorIs(t, err, dlm.ErrNotAcquired)
		thaw(t, topo.Replicas...)
		ext, err := f.Extend(ctx, "ext", "tok", ttl)
		require.NoError(t, err)
		assert.Equal(t, lease.Fence, ext.Fence)
	})

	t.Run("validity is counted from before the request, wait included", func(t *testing.T) {
		f := newFailover(t, node)
		before := time.Now()
		lease, err := f.Acquire(ctx, "validity", "tok", ttl)
		after := time.Now()
		require.NoError(t, err)
		drift := time.Duration(float64(ttl)*strategy.DefaultDriftFactor) + 2*time.Millisecond
		assert.False(t, lease.Until.Before(before.Add(ttl-drift)))
		assert.False(t, lease.Until.After(after.Add(ttl-drift)))
	})
}

// TestFailoverSentinel reproduces the race the Redlock specification
// describes and shows what AckAll changes, each on its own primary, two
// replicas and three Sentinels.
func TestFailoverSentinel(t *testing.T) {
	const ttl = 60 * time.Second // outlives the failover
	start := func(t *testing.T) (*redistest.Replicated, func() *redis.Client) {
		topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{
			Sentinels: 3, DownAfter: time.Second, FailoverTimeout: 5 * time.Second,
		})
		return topo, func() *redis.Client {
			c := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: topo.Master, SentinelAddrs: topo.SentinelAddrs(),
				ContextTimeoutEnabled: true, MaxRetries: -1,
				DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	}
	// retry calls f until done says to stop or 30s pass, and returns f's last error.
	retry := func(f func() error, done func(error) bool) error {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := f()
			if done(err) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	t.Run("policy none: two clients hold the lock after a failover", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		topo, client := start(t)
		a := newFailover(t, goredis.New(client()), strategy.WithAcks(strategy.AckNone()))
		b := newFailover(t, goredis.New(client()), strategy.WithAcks(strategy.AckNone()))

		freeze(t, topo.Replicas...)
		// A frozen replica's kernel still receives what the primary sends,
		// and the replica applies it once thawed. Cutting the replication
		// links as well keeps the write from ever reaching a replica.
		require.NoError(t, topo.Primary.Client(t).ClientKillByFilter(ctx, "TYPE", "replica").Err())
		leaseA, err := a.Acquire(ctx, "race", "A", ttl)
		require.NoError(t, err, "policy none grants on the primary alone")

		old := topo.Primary
		old.Kill(t)
		thaw(t, topo.Replicas...)
		promoted := topo.WaitFailover(t, old, 30*time.Second)
		t.Logf("Sentinel promoted %s", promoted.Addr)

		var leaseB driver.Lease
		err = retry(func() (err error) {
			leaseB, err = b.Acquire(ctx, "race", "B", ttl)
			return err
		}, func(err error) bool { return err == nil })
		require.NoError(t, err, "the second client takes the lock on the promoted replica")

		assert.True(t, time.Now().Before(leaseA.Until), "A's lease is still valid")
		assert.Equal(t, "B", lockHolder(t, promoted.Client(t), "race"))
		assert.LessOrEqual(t, leaseB.Fence, leaseA.Fence, "the fence went backwards with the lost write")
		t.Logf("two holders: A (fence %d, valid %v more) and B (fence %d)",
			leaseA.Fence, time.Until(leaseA.Until).Round(time.Millisecond), leaseB.Fence)
		_, err = a.Extend(ctx, "race", "A", ttl)
		assert.ErrorIs(t, err, dlm.ErrNotHeld, "A finds out only when it next talks to the primary")
	})

	t.Run("policy all: refused while replicas are frozen; a granted lock survives the failover", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		topo, client := start(t)
		opts := []strategy.Option{strategy.WithWaitTimeout(200 * time.Millisecond)}
		a := newFailover(t, goredis.New(client()), opts...)
		b := newFailover(t, goredis.New(client()), opts...)

		freeze(t, topo.Replicas...)
		_, err := a.Acquire(ctx, "race", "A", ttl)
		var ack *strategy.AckError
		require.ErrorAs(t, err, &ack)
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		assert.ErrorContains(t, err, "0 of 2 replicas acknowledged")
		pc := topo.Primary.Client(t)
		assert.Eventually(t, func() bool { return pc.Exists(ctx, "dlm:{race}").Val() == 0 }, time.Second, 5*time.Millisecond, "rolled back")
		thaw(t, topo.Replicas...)

		var leaseA driver.Lease
		err = retry(func() (err error) {
			leaseA, err = a.Acquire(ctx, "race", "A", ttl)
			return err
		}, func(err error) bool { return err == nil })
		require.NoError(t, err, "granted with replication healthy")
		for _, r := range topo.Replicas {
			assert.Equal(t, "A", lockHolder(t, r.Client(t), "race"), "on replica %s", r.Addr)
		}

		old := topo.Primary
		old.Kill(t)
		promoted := topo.WaitFailover(t, old, 30*time.Second)
		t.Logf("Sentinel promoted %s", promoted.Addr)

		var held *strategy.HeldError
		err = retry(func() error {
			_, err := b.Acquire(ctx, "race", "B", ttl)
			return err
		}, func(err error) bool { return err == nil || errors.As(err, &held) })
		require.ErrorAs(t, err, &held, "the promoted replica still holds A's lock")
		assert.Equal(t, "A", lockHolder(t, promoted.Client(t), "race"))

		require.NoError(t, a.Release(ctx, "race", "A"), "A still holds it on the new primary")
		var leaseB driver.Lease
		err = retry(func() (err error) {
			leaseB, err = b.Acquire(ctx, "race", "B", ttl)
			return err
		}, func(err error) bool { return err == nil })
		require.NoError(t, err)
		assert.Greater(t, leaseB.Fence, leaseA.Fence, "the fence carried over to the new primary")
	})
}

// BenchmarkFailover measures Acquire+Release on a primary with two healthy
// replicas, per policy: what waiting for acknowledgements costs.
func BenchmarkFailover(b *testing.B) {
	topo := redistest.StartReplicated(b, redistest.ReplicatedOptions{})
	c := redis.NewClient(&redis.Options{Addr: topo.Primary.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	for _, p := range []strategy.AckPolicy{strategy.AckNone(), strategy.AckN(1), strategy.AckAll()} {
		b.Run(p.String(), func(b *testing.B) {
			f, err := strategy.NewFailover(goredis.New(c), strategy.WithAcks(p))
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.Acquire(ctx, "bench", "tok", 10*time.Second); err != nil {
					b.Fatal(err)
				}
				if err := f.Release(ctx, "bench", "tok"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The failover strategy over a go-redis Sentinel client: every lock is
// granted only after both replicas acknowledged it.
func ExampleNewFailover() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	failover, err := strategy.NewFailover(goredis.New(client),
		strategy.WithAcks(strategy.AckAll()), // every replica...
		strategy.WithReplicas(2),             // ...of the two the deployment has
		strategy.WithWaitTimeout(100*time.Millisecond),
		strategy.WithTimeout(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := dlm.New(failover, dlm.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	lock, err := m.TryLock(context.Background(), "orders:42")
	var ack *strategy.AckError
	if errors.As(err, &ack) {
		fmt.Printf("only %d of %d replicas acknowledged\n", ack.Acked, ack.Wanted)
		return
	}
	if err != nil {
		fmt.Println(strings.TrimPrefix(err.Error(), "dlm: "))
		return
	}
	defer lock.Unlock(context.Background())
}
