package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

// incr writes, so WAIT after it has something to count.
const incr = "return {redis.call('INCR', KEYS[1])}"

// evalWait runs src with EVAL and then w through RunWait, and returns the
// script's reply (kept when only the wait failed), the acks and the error.
func evalWait(ctx context.Context, n driver.Node, w driver.Wait, src string, keys []string) ([]int64, driver.Acks, error) {
	calls := []driver.Call{{Source: src, Keys: keys}}
	acks, err := n.RunWait(ctx, calls, w)
	return calls[0].Reply, acks, err
}

// TestRunWait, on a primary with a replica; on a Cluster, runWaitCluster
// (TestCluster).
func TestRunWait(t *testing.T) {
	t.Parallel() // owns its servers
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1})
	ctx := context.Background()
	w := driver.Wait{Replicas: 1, Timeout: time.Second}

	t.Run("replies and acknowledgements", func(t *testing.T) {
		n := goredis.New(topo.Primary.Client(t))
		r, acks, err := evalWait(ctx, n, w, incr, []string{"ew"})
		require.NoError(t, err)
		assert.Equal(t, []int64{1}, r)
		assert.Equal(t, driver.Acks{Replicas: 1}, acks)
		assert.Equal(t, "1", topo.Replicas[0].Client(t).Get(ctx, "ew").Val(), "acknowledged means the replica has it")

		calls := []driver.Call{{Source: incr, Keys: []string{"ew"}}, {Source: incr, Keys: []string{"ew2"}}}
		acks, err = n.RunWait(ctx, calls, w)
		require.NoError(t, err)
		assert.Equal(t, []int64{2}, calls[0].Reply)
		assert.Equal(t, []int64{1}, calls[1].Reply)
		assert.Equal(t, driver.Acks{Replicas: 1}, acks, "one WAIT after several calls")

		calls = []driver.Call{{SHA1: eval.NewScript("return {7}").SHA1()}}
		_, err = n.RunWait(ctx, calls, w)
		assert.ErrorIs(t, err, driver.ErrNoScript)
		assert.ErrorIs(t, calls[0].Err, driver.ErrNoScript)
		r, _, err = eval.NewScript("return {7}").RunWait(ctx, n, w, nil)
		require.NoError(t, err, "RunWait falls back to EVAL")
		assert.Equal(t, []int64{7}, r)
	})

	t.Run("bad waits are refused before anything is sent", func(t *testing.T) {
		n := goredis.New(topo.Primary.Client(t))
		for _, bad := range []driver.Wait{{Replicas: 1}, {Replicas: -1, Timeout: time.Second}, {Timeout: time.Second, Local: true}} {
			_, _, err := evalWait(ctx, n, bad, incr, []string{"bad"})
			assert.ErrorIs(t, err, driver.ErrInvalid, "%+v", bad)
		}
		assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "bad").Val())
	})

	t.Run("a failed wait keeps the script's reply", func(t *testing.T) {
		n := goredis.New(topo.Primary.Client(t))
		r, _, err := evalWait(ctx, n, driver.Wait{Replicas: 1, Timeout: time.Second, AOF: true}, incr, []string{"aof"})
		if err == nil {
			t.Skip("this server offers WAITAOF")
		}
		assert.ErrorContains(t, err, "WAITAOF")
		assert.Equal(t, []int64{1}, r, "the script ran; the caller must be able to undo it")
	})

	t.Run("the context bounds a blocked WAIT", func(t *testing.T) {
		for _, onWire := range []bool{true, false} {
			// WAIT's timeout is a minute and the ReadTimeout two: a Node
			// that did not end the call at the context's deadline would
			// hold it for a minute, far beyond the bound below, which a
			// loaded machine does not reach.
			c := redis.NewClient(&redis.Options{Addr: topo.Primary.Addr, ContextTimeoutEnabled: onWire, ReadTimeout: 2 * time.Minute})
			n := goredis.New(c)
			topo.Replicas[0].Freeze(t)
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			start := time.Now()
			_, _, err := evalWait(cctx, n, driver.Wait{Replicas: 1, Timeout: time.Minute}, incr, []string{"blocked"})
			elapsed := time.Since(start)
			cancel()
			topo.Replicas[0].Thaw(t)
			_ = c.Close()
			assert.Error(t, err, "ContextTimeoutEnabled=%v", onWire)
			assert.Less(t, elapsed, 30*time.Second, "ContextTimeoutEnabled=%v: returned at the deadline, not after WAIT's minute", onWire)
		}
	})

	t.Run("a client that cannot pin a connection says so", func(t *testing.T) {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": topo.Primary.Addr}})
		defer ring.Close()
		calls := []driver.Call{{Source: incr, Keys: []string{"ring"}}}
		_, err := goredis.New(ring).RunWait(ctx, calls, w)
		assert.ErrorContains(t, err, "cannot send scripts and WAIT on one connection")
		assert.ErrorIs(t, err, errors.ErrUnsupported)
		assert.ErrorIs(t, calls[0].Err, errors.ErrUnsupported, "the call did not run")
		assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "ring").Val())
	})
}

// runWaitCluster: on a Cluster (of masters without replicas), the
// pipeline of a call and its WAIT goes to the key's master. Run by
// TestCluster.
func runWaitCluster(t *testing.T, nodes []*redistest.Server) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	defer c.Close()
	r, acks, err := evalWait(context.Background(), goredis.New(c), driver.Wait{Replicas: 1, Timeout: 50 * time.Millisecond}, incr, []string{"cw"})
	require.NoError(t, err)
	assert.Equal(t, []int64{1}, r)
	assert.Zero(t, acks.Replicas, "the cluster master has no replica")
}
