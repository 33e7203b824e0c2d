package nodekit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

// incr writes, so WAIT after it has something to count.
const incr = "return {redis.call('INCR', KEYS[1])}"

// evalWait runs src with EVAL and then w on n, as one RunWait call, and
// returns the call's reply (kept when only the wait failed).
func evalWait(ctx context.Context, n driver.Node, w driver.Wait, src string, keys ...string) ([]int64, driver.Acks, error) {
	c := []driver.Call{{Source: src, Keys: keys}}
	acks, err := n.RunWait(ctx, c, w)
	return c[0].Reply, acks, err
}

func TestPipeNodeRunWait(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2})
		ctx := context.Background()
		all := driver.Wait{Replicas: 2, Timeout: 2 * time.Second}
		n := d.node(t, pipeOptions{addrs: []string{topo.Primary.Addr}})

		t.Run("both replicas acknowledge the script's write", func(t *testing.T) {
			r, acks, err := evalWait(ctx, n, all, incr, "ew")
			require.NoError(t, err)
			assert.Equal(t, []int64{1}, r)
			assert.Equal(t, driver.Acks{Replicas: 2}, acks)
			for _, rep := range topo.Replicas {
				assert.Equal(t, "1", rep.Client(t).Get(ctx, "ew").Val(), "acknowledged means replica %s has it", rep.Addr)
			}

			_, err = n.RunWait(ctx, []driver.Call{{SHA1: eval.NewScript("return {7}").SHA1()}}, all)
			assert.ErrorIs(t, err, driver.ErrNoScript)
			r, acks, err = eval.NewScript("return {7}").RunWait(ctx, n, all, nil)
			require.NoError(t, err, "RunWait falls back to EVAL")
			assert.Equal(t, []int64{7}, r)
			assert.Equal(t, 2, acks.Replicas)
			// EVAL cached incr: EVALSHA finds it.
			r, acks, err = eval.NewScript(incr).RunWait(ctx, n, all, []string{"ew"})
			require.NoError(t, err)
			assert.Equal(t, []int64{2}, r)
			assert.Equal(t, 2, acks.Replicas)

			// Several calls, then WAIT: it counts them all.
			calls := []driver.Call{{Source: incr, Keys: []string{"ew"}}, {Source: incr, Keys: []string{"ew2"}}}
			acks, err = n.RunWait(ctx, calls, all)
			require.NoError(t, err)
			assert.Equal(t, []int64{3}, calls[0].Reply)
			assert.Equal(t, []int64{1}, calls[1].Reply)
			assert.Equal(t, 2, acks.Replicas)
			for _, rep := range topo.Replicas {
				assert.Equal(t, "1", rep.Client(t).Get(ctx, "ew2").Val(), "replica %s has the last call's write", rep.Addr)
			}
		})

		t.Run("a failed call fails RunWait and the other replies are kept", func(t *testing.T) {
			calls := []driver.Call{
				{Source: incr, Keys: []string{"kept"}},
				{Source: "return redis.error_reply('first')", Keys: []string{"x"}},
				{Source: "return redis.error_reply('second')", Keys: []string{"x"}},
			}
			acks, err := n.RunWait(ctx, calls, all)
			assert.ErrorContains(t, err, "first", "the first failed call's error")
			assert.Zero(t, acks)
			assert.Equal(t, []int64{1}, calls[0].Reply, "the caller can undo the first call")
			assert.ErrorContains(t, calls[2].Err, "second")
		})

		t.Run("a script error gives zero acks", func(t *testing.T) {
			r, acks, err := evalWait(ctx, n, all, "return redis.error_reply('boom')", "x")
			assert.ErrorContains(t, err, "boom")
			assert.Nil(t, r)
			assert.Zero(t, acks)
		})

		t.Run("bad waits are refused before anything is sent", func(t *testing.T) {
			for _, bad := range []driver.Wait{{Replicas: 1}, {Replicas: -1, Timeout: time.Second}, {Timeout: time.Second, Local: true}} {
				_, _, err := evalWait(ctx, n, bad, incr, "bad")
				assert.ErrorIs(t, err, driver.ErrInvalid, "%+v", bad)
			}
			assert.Zero(t, topo.Primary.Client(t).Exists(ctx, "bad").Val())
		})

		t.Run("a failed wait keeps the script's reply", func(t *testing.T) {
			r, _, err := evalWait(ctx, n, driver.Wait{Replicas: 1, Timeout: time.Second, AOF: true}, incr, "aof")
			if err == nil {
				t.Skip("this server offers WAITAOF")
			}
			assert.ErrorContains(t, err, "WAITAOF")
			assert.Equal(t, []int64{1}, r, "the script ran; the caller must be able to undo it")
		})

		t.Run("a frozen replica does not acknowledge", func(t *testing.T) {
			topo.Replicas[1].Freeze(t)
			defer topo.Replicas[1].Thaw(t)
			r, acks, err := evalWait(ctx, n, driver.Wait{Replicas: 2, Timeout: 100 * time.Millisecond}, incr, "one-frozen")
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
			other := topo.Primary.Client(t).Conn() // one connection
			t.Cleanup(func() { _ = other.Close() })
			_, acks, err := evalWait(ctx, n, all, incr, "caught-up")
			require.NoError(t, err)
			require.Equal(t, 2, acks.Replicas)
			// The last write before the freeze is other's: once the replicas
			// acknowledged it they have every earlier write too, so no
			// connection of the node has a write pending.
			require.NoError(t, other.Set(ctx, "other", "1", 0).Err())
			caught, err := other.Wait(ctx, 2, 2*time.Second).Result()
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
			w := driver.Wait{Replicas: 2, Timeout: 100 * time.Millisecond}

			// The first call after the freeze tells: a driver that sent WAIT on
			// a caught-up connection other than the script's would report both
			// replicas at once. (Later WAITs on such a connection report 0 as
			// well: Redis 7.0 records the offset of any command, WAIT included.)
			start := time.Now()
			r, acks, err := evalWait(ctx, n, w, incr, "fp-right")
			require.NoError(t, err)
			assert.Equal(t, []int64{1}, r)
			assert.Zero(t, acks.Replicas, "no frozen replica acknowledged the script's write")
			assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond, "WAIT waited for its timeout")

			// The false positive this rules out: WAIT on another caught-up
			// connection after the script.
			wrong, err := other.Wait(ctx, 2, 100*time.Millisecond).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(2), wrong, "WAIT on another connection reports both frozen replicas")
		})
	})
}

// A WAIT blocked on a frozen replica returns when its context ends (WAIT's
// own timeout, a minute, and the client's, slowClient, are far beyond the
// bound atOnce), and the abandoned connection does not hold up the next
// call.
func TestPipeNodeRunWaitContext(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1})
		ctx := context.Background()
		for _, tc := range []struct {
			name     string
			opt      pipeOptions
			deadline bool
		}{
			{"autopipelining/deadline", pipeOptions{}, true},
			{"autopipelining/cancel", pipeOptions{}, false},
			{"pool/deadline", pipeOptions{noAutoPipelining: true}, true},
			{"pool/cancel", pipeOptions{noAutoPipelining: true}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.opt.addrs = []string{topo.Primary.Addr}
				tc.opt.connWriteTimeout = slowClient
				n := d.node(t, tc.opt)
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
				_, _, err := evalWait(cctx, n, driver.Wait{Replicas: 1, Timeout: time.Minute}, incr, "blocked")
				elapsed := time.Since(start)
				cancel()
				topo.Replicas[0].Thaw(t)
				assert.Error(t, err)
				assert.Less(t, elapsed, atOnce, "returned when the context ended, not after WAIT's minute")
				// The abandoned connection does not hold up the next call.
				start = time.Now()
				_, acks, err := evalWait(ctx, n, driver.Wait{Replicas: 1, Timeout: time.Minute}, incr, "after")
				require.NoError(t, err)
				assert.Equal(t, 1, acks.Replicas)
				assert.Less(t, time.Since(start), atOnce, "not held up behind the abandoned WAIT's minute")
			})
		}
	})
}

// clusterRunWait: on a Cluster of three masters without replicas (emptied),
// RunWait sends each call and its WAIT to the key's master, and refuses,
// sending nothing, calls whose keys span slots. Run by TestPipeNodeCluster.
func clusterRunWait(t *testing.T, d pipeDriver, nodes []*redistest.Server) {
	n := d.node(t, pipeOptions{addrs: []string{nodes[0].Addr}})
	ctx := context.Background()
	// Keys on every master: the dedicated connection does not follow
	// redirections, so a reply (not MOVED) shows it went to the slot's owner.
	for i := range 12 {
		key := "cw" + strconv.Itoa(i)
		r, acks, err := evalWait(ctx, n, driver.Wait{Replicas: 1, Timeout: 20 * time.Millisecond}, incr, key)
		require.NoError(t, err, key)
		assert.Equal(t, []int64{1}, r, key)
		assert.Zero(t, acks.Replicas, "the cluster's masters have no replica")
	}
	w := driver.Wait{Replicas: 1, Timeout: 20 * time.Millisecond}
	_, _, err := evalWait(ctx, n, w, incr, "a", "b")
	assert.ErrorIs(t, err, driver.ErrInvalid, "keys in different slots")

	// Several calls share one dedicated connection, so one slot.
	calls := []driver.Call{{Source: incr, Keys: []string{"{s}1"}}, {Source: incr, Keys: []string{"{s}2"}}}
	_, err = n.RunWait(ctx, calls, w)
	require.NoError(t, err)
	assert.Equal(t, []int64{1}, calls[0].Reply)
	assert.Equal(t, []int64{1}, calls[1].Reply)
	calls = []driver.Call{{Source: incr, Keys: []string{"a"}}, {Source: incr, Keys: []string{"b"}}}
	_, err = n.RunWait(ctx, calls, w)
	assert.ErrorIs(t, err, driver.ErrInvalid, "calls in different slots")
	for _, c := range calls {
		assert.ErrorIs(t, c.Err, driver.ErrInvalid)
	}
	assert.Zero(t, nodes[0].Client(t).Exists(ctx, "a").Val()+nodes[1].Client(t).Exists(ctx, "a").Val()+nodes[2].Client(t).Exists(ctx, "a").Val(), "nothing was sent")
}
