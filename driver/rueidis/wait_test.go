package rueidis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// incr writes, so WAIT after it has something to count.
const incr = "return {redis.call('INCR', KEYS[1])}"

func TestEvalWait(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2})
	ctx := context.Background()
	all := dlm.Wait{Replicas: 2, Timeout: 2 * time.Second}
	n := rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{topo.Primary.Addr}}))
	var _ dlm.ReplicaWaiter = n

	t.Run("both replicas acknowledge the script's write", func(t *testing.T) {
		r, acks, err := n.EvalWait(ctx, all, incr, []string{"ew"})
		require.NoError(t, err)
		assert.Equal(t, []int64{1}, r)
		assert.Equal(t, dlm.Acks{Replicas: 2}, acks)
		for _, rep := range topo.Replicas {
			assert.Equal(t, "1", rep.Client(t).Get(ctx, "ew").Val(), "acknowledged means replica %s has it", rep.Addr)
		}

		_, _, err = n.EvalSHAWait(ctx, all, dlm.NewScript("return {7}").SHA1(), nil)
		assert.ErrorIs(t, err, dlm.ErrNoScript)
		r, acks, err = dlm.NewScript("return {7}").RunWait(ctx, n, all, nil)
		require.NoError(t, err, "RunWait falls back to EVAL")
		assert.Equal(t, []int64{7}, r)
		assert.Equal(t, 2, acks.Replicas)
		// EVAL cached incr: EVALSHA finds it.
		r, acks, err = n.EvalSHAWait(ctx, all, dlm.NewScript(incr).SHA1(), []string{"ew"})
		require.NoError(t, err)
		assert.Equal(t, []int64{2}, r)
		assert.Equal(t, 2, acks.Replicas)
	})

	t.Run("a script error gives zero acks", func(t *testing.T) {
		r, acks, err := n.EvalWait(ctx, all, "return redis.error_reply('boom')", []string{"x"})
		assert.ErrorContains(t, err, "boom")
		assert.Nil(t, r)
		assert.Zero(t, acks)
	})

	t.Run("bad waits are refused before anything is sent", func(t *testing.T) {
		for _, bad := range []dlm.Wait{{Replicas: 1}, {Replicas: -1, Timeout: time.Second}, {Timeout: time.Second, Local: true}} {
			_, _, err := n.EvalWait(ctx, bad, incr, []string{"bad"})
			assert.ErrorIs(t, err, dlm.ErrInvalid, "%+v", bad)
		}
		assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "bad").Val())
	})

	t.Run("a failed wait keeps the script's reply", func(t *testing.T) {
		r, _, err := n.EvalWait(ctx, dlm.Wait{Replicas: 1, Timeout: time.Second, AOF: true}, incr, []string{"aof"})
		if err == nil {
			t.Skip("this server offers WAITAOF")
		}
		assert.ErrorContains(t, err, "WAITAOF")
		assert.Equal(t, []int64{1}, r, "the script ran; the caller must be able to undo it")
	})

	t.Run("a frozen replica does not acknowledge", func(t *testing.T) {
		topo.Replicas[1].Freeze(t)
		defer topo.Replicas[1].Thaw(t)
		r, acks, err := n.EvalWait(ctx, dlm.Wait{Replicas: 2, Timeout: 100 * time.Millisecond}, incr, []string{"one-frozen"})
		require.NoError(t, err)
		assert.Equal(t, []int64{1}, r)
		assert.Equal(t, 1, acks.Replicas, "only the running replica acknowledged within the timeout")
	})

	t.Run("WAIT follows the script on its connection", func(t *testing.T) {
		// WAIT counts the acknowledgements of the last write of the
		// connection it runs on. other is a connection whose writes the
		// replicas already acknowledged; a WAIT sent there after the script
		// (as a driver that used any connection for it would do) returns at
		// once with both replicas though neither has the script's write.
		other := newClient(t, rueidis.ClientOption{InitAddress: []string{topo.Primary.Addr}, DisableAutoPipelining: true, BlockingPoolSize: 1})
		_, acks, err := n.EvalWait(ctx, all, incr, []string{"caught-up"})
		require.NoError(t, err)
		require.Equal(t, 2, acks.Replicas)
		// The last write before the freeze is other's: once the replicas
		// acknowledged it they have every earlier write too, so no
		// connection of the node has a write pending.
		require.NoError(t, other.Do(ctx, other.B().Set().Key("other").Value("1").Build()).Error())
		caught, err := other.Do(ctx, other.B().Wait().Numreplicas(2).Timeout(2000).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(2), caught, "replicas caught up with every write")

		for _, r := range topo.Replicas {
			r.Freeze(t)
		}
		defer func() {
			for _, r := range topo.Replicas {
				r.Thaw(t)
			}
		}()
		w := dlm.Wait{Replicas: 2, Timeout: 100 * time.Millisecond}

		// The first call after the freeze tells: a driver that sent WAIT on
		// a caught-up connection other than the script's would report both
		// replicas at once. (Later WAITs on such a connection report 0 as
		// well: Redis 7.0 records the offset of any command, WAIT included.)
		start := time.Now()
		r, acks, err := n.EvalWait(ctx, w, incr, []string{"fp-right"})
		require.NoError(t, err)
		assert.Equal(t, []int64{1}, r)
		assert.Zero(t, acks.Replicas, "no frozen replica acknowledged the script's write")
		assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond, "WAIT waited for its timeout")

		// The false positive this rules out: WAIT on another caught-up
		// connection after the script.
		wrong, err := other.Do(ctx, other.B().Wait().Numreplicas(2).Timeout(100).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(2), wrong, "WAIT on another connection reports both frozen replicas")
	})
}

func TestEvalWaitContext(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1})
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		opt      rueidis.ClientOption
		deadline bool
	}{
		{"autopipelining/deadline", rueidis.ClientOption{}, true},
		{"autopipelining/cancel", rueidis.ClientOption{}, false},
		{"pool/deadline", rueidis.ClientOption{DisableAutoPipelining: true}, true},
		{"pool/cancel", rueidis.ClientOption{DisableAutoPipelining: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.InitAddress = []string{topo.Primary.Addr}
			n := rueidisnode.New(newClient(t, tc.opt))
			topo.Replicas[0].Freeze(t)
			var cctx context.Context
			var cancel context.CancelFunc
			if tc.deadline {
				cctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
			} else {
				cctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(200*time.Millisecond, cancel)
			}
			start := time.Now()
			_, _, err := n.EvalWait(cctx, dlm.Wait{Replicas: 1, Timeout: 5 * time.Second}, incr, []string{"blocked"})
			elapsed := time.Since(start)
			cancel()
			topo.Replicas[0].Thaw(t)
			assert.Error(t, err)
			assert.Less(t, elapsed, 4*time.Second, "returned when the context ended, not after WAIT's 5s")
			// The abandoned connection does not hold up the next call.
			start = time.Now()
			_, acks, err := n.EvalWait(ctx, dlm.Wait{Replicas: 1, Timeout: 5 * time.Second}, incr, []string{"after"})
			require.NoError(t, err)
			assert.Equal(t, 1, acks.Replicas)
			assert.Less(t, time.Since(start), 4*time.Second)
		})
	}
}

func TestEvalWaitCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	n := rueidisnode.New(newClient(t, rueidis.ClientOption{InitAddress: []string{nodes[0].Addr}}))
	ctx := context.Background()
	// Keys on every master: the dedicated connection does not follow
	// redirections, so a reply (not MOVED) shows it went to the slot's owner.
	for i := range 12 {
		key := "cw" + strconv.Itoa(i)
		r, acks, err := n.EvalWait(ctx, dlm.Wait{Replicas: 1, Timeout: 20 * time.Millisecond}, incr, []string{key})
		require.NoError(t, err, key)
		assert.Equal(t, []int64{1}, r, key)
		assert.Zero(t, acks.Replicas, "the cluster's masters have no replica")
	}
	_, _, err := n.EvalWait(ctx, dlm.Wait{Replicas: 1, Timeout: 20 * time.Millisecond}, incr, []string{"a", "b"})
	assert.ErrorIs(t, err, dlm.ErrInvalid, "keys in different slots")
}
