package goredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// incr writes, so WAIT after it has something to count.
const incr = "return {redis.call('INCR', KEYS[1])}"

func TestEvalWait(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1})
	ctx := context.Background()
	w := dlm.Wait{Replicas: 1, Timeout: time.Second}

	t.Run("replies and acknowledgements", func(t *testing.T) {
		n := goredis.New(topo.Primary.Client(t))
		r, acks, err := n.EvalWait(ctx, w, incr, []string{"ew"})
		require.NoError(t, err)
		assert.Equal(t, []int64{1}, r)
		assert.Equal(t, dlm.Acks{Replicas: 1}, acks)
		assert.Equal(t, "1", topo.Replicas[0].Client(t).Get(ctx, "ew").Val(), "acknowledged means the replica has it")

		_, _, err = n.EvalSHAWait(ctx, w, dlm.NewScript("return {7}").SHA1(), nil)
		assert.ErrorIs(t, err, dlm.ErrNoScript)
		r, _, err = dlm.NewScript("return {7}").RunWait(ctx, n, w, nil)
		require.NoError(t, err, "RunWait falls back to EVAL")
		assert.Equal(t, []int64{7}, r)
	})

	t.Run("bad waits are refused before anything is sent", func(t *testing.T) {
		n := goredis.New(topo.Primary.Client(t))
		for _, bad := range []dlm.Wait{{Replicas: 1}, {Replicas: -1, Timeout: time.Second}, {Timeout: time.Second, Local: true}} {
			_, _, err := n.EvalWait(ctx, bad, incr, []string{"bad"})
			assert.ErrorIs(t, err, dlm.ErrInvalid, "%+v", bad)
		}
		assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "bad").Val())
	})

	t.Run("a failed wait keeps the script's reply", func(t *testing.T) {
		n := goredis.New(topo.Primary.Client(t))
		r, _, err := n.EvalWait(ctx, dlm.Wait{Replicas: 1, Timeout: time.Second, AOF: true}, incr, []string{"aof"})
		if err == nil {
			t.Skip("this server offers WAITAOF")
		}
		assert.ErrorContains(t, err, "WAITAOF")
		assert.Equal(t, []int64{1}, r, "the script ran; the caller must be able to undo it")
	})

	t.Run("the context bounds a blocked WAIT", func(t *testing.T) {
		for _, onWire := range []bool{true, false} {
			c := redis.NewClient(&redis.Options{Addr: topo.Primary.Addr, ContextTimeoutEnabled: onWire, ReadTimeout: 10 * time.Second})
			n := goredis.New(c)
			topo.Replicas[0].Freeze(t)
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			start := time.Now()
			_, _, err := n.EvalWait(cctx, dlm.Wait{Replicas: 1, Timeout: 5 * time.Second}, incr, []string{"blocked"})
			elapsed := time.Since(start)
			cancel()
			topo.Replicas[0].Thaw(t)
			_ = c.Close()
			assert.Error(t, err, "ContextTimeoutEnabled=%v", onWire)
			assert.Less(t, elapsed, 4*time.Second, "ContextTimeoutEnabled=%v: returned at the deadline, not after WAIT's 5s", onWire)
		}
	})

	t.Run("cluster: the pipeline goes to the key's master", func(t *testing.T) {
		nodes := redistest.StartCluster(t, 1)
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
		defer c.Close()
		r, acks, err := goredis.New(c).EvalWait(ctx, dlm.Wait{Replicas: 1, Timeout: 50 * time.Millisecond}, incr, []string{"cw"})
		require.NoError(t, err)
		assert.Equal(t, []int64{1}, r)
		assert.Zero(t, acks.Replicas, "the cluster master has no replica")
	})

	t.Run("a client that cannot pin a connection says so", func(t *testing.T) {
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": topo.Primary.Addr}})
		defer ring.Close()
		_, _, err := goredis.New(ring).EvalWait(ctx, w, incr, []string{"ring"})
		assert.ErrorContains(t, err, "cannot send a script and WAIT on one connection")
	})
}
