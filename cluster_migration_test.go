package dlm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// A hash slot moved between two masters while locks in it are held and
// auto-renewed and four goroutines contend for another of its keys, over
// clients with default options: no held lock is lost, and once the slot
// has moved, acquisitions in it succeed again at once (a fresh acquisition
// gets TRYAGAIN while the slot's keys are split between the masters, and
// is retried promptly). The rates before, during and after are logged.
func TestClusterSlotMigration(t *testing.T) {
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterReplicas(t, 0, 0)
			ctx := context.Background()
			m := newM(t, newSingle(t, tc.node(t, cl.Masters[0].Addr)), dlm.WithTTL(2*time.Second), dlm.WithAutoRenew(1.0/3, time.Hour))

			// Keys with one hash tag: their locks and their fencing counter
			// share its slot.
			_, counter := strategy.Keys("migrating")
			tag := counter[strings.IndexByte(counter, '{'):]
			slot, err := cl.Masters[0].Client(t).ClusterKeySlot(ctx, counter).Result()
			require.NoError(t, err)
			from, to := cl.Masters[0], cl.Masters[1]
			if slot >= 8192 {
				from, to = to, from
			}
			fc := from.Client(t)
			for i := range 300 { // data of the slot, so that the move takes a while
				require.NoError(t, fc.Set(ctx, fmt.Sprintf("%sdata-%d", tag, i), "x", 0).Err())
			}
			held := make([]*dlm.Lock, 10)
			for i := range held {
				held[i], err = m.TryLock(ctx, fmt.Sprintf("%sheld-%d", tag, i))
				require.NoError(t, err)
			}

			// Four goroutines take turns on one key of the slot.
			contended := tag + "contended"
			var mu sync.Mutex
			var grants []time.Time
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						lctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
						l, err := m.Lock(lctx, contended)
						cancel()
						if err != nil {
							continue
						}
						mu.Lock()
						grants = append(grants, time.Now())
						mu.Unlock()
						_ = l.Unlock(ctx)
					}
				}()
			}
			time.Sleep(time.Second)
			began := time.Now()
			cl.MigrateSlot(t, int(slot), from, to, 10, 50*time.Millisecond)
			moved := time.Now()
			time.Sleep(time.Second)
			close(stop)
			wg.Wait()

			rate := func(a, b time.Time) (n int, perSec float64) {
				for _, g := range grants {
					if !g.Before(a) && g.Before(b) {
						n++
					}
				}
				return n, float64(n) / b.Sub(a).Seconds()
			}
			recovered := time.Duration(-1)
			for _, g := range grants {
				if g.After(moved) {
					recovered = g.Sub(moved)
					break
				}
			}
			nb, before := rate(began.Add(-time.Second), began)
			nd, during := rate(began, moved)
			na, after := rate(moved, moved.Add(time.Second))
			t.Logf("%s: contended acquisitions before %d (%.0f/s), during the %v move %d (%.0f/s), after %d (%.0f/s); first grant %v after the move",
				tc.name, nb, before, moved.Sub(began).Round(time.Millisecond), nd, during, na, after, recovered.Round(time.Microsecond))
			assert.Positive(t, na, "grants resumed within a second of the move")
			assert.GreaterOrEqual(t, recovered, time.Duration(0))

			onTarget := locksOn(t, to, tag+"held-")
			for i, l := range held {
				assert.NoError(t, l.Context().Err(), "held lock %d lost: %v", i, context.Cause(l.Context()))
				assert.True(t, onTarget[i], "held lock %d moved with its slot", i)
				assert.NoError(t, l.Unlock(ctx))
			}
		})
	}
}

// While a lock's slot is split between two masters, a waiting Lock tries
// again every few milliseconds (TRYAGAIN says the script did not run) and
// sends no release to undo it; it is granted within moments of the move's
// end.
func TestLockRetriesPromptlyWhileSlotMoves(t *testing.T) {
	for _, tc := range clusterClients {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartClusterReplicas(t, 0, 0)
			ctx := context.Background()
			node := &countingNode{Node: tc.node(t, cl.Masters[0].Addr)}
			// Ordinary retries wait a minute: only TRYAGAIN's short
			// RetryAfter can make attempts and a grant come sooner.
			m := newM(t, newSingle(t, node), dlm.WithRetryDelay(time.Minute, 2*time.Minute))
			key := "moving"
			_, counter := strategy.Keys(key)
			slot, err := cl.Masters[0].Client(t).ClusterKeySlot(ctx, counter).Result()
			require.NoError(t, err)
			from, to := cl.Masters[0], cl.Masters[1]
			if slot >= 8192 {
				from, to = to, from
			}
			l, err := m.TryLock(ctx, key) // the slot's counter exists on from
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))

			cl.BeginMigration(t, int(slot), from, to)
			_, err = m.TryLock(ctx, key)
			require.ErrorIs(t, err, dlm.ErrNotAcquired)
			require.ErrorContains(t, err, "TRYAGAIN")
			wait, ok := dlm.RetryAfter(err)
			assert.True(t, ok && wait <= 20*time.Millisecond, "RetryAfter %v %v", wait, ok)

			node.acquires.Store(0)
			node.releases.Store(0)
			got := make(chan time.Time, 1)
			go func() {
				l, err := m.Lock(ctx, key)
				if err == nil {
					got <- time.Now()
					_ = l.Unlock(ctx)
				}
				close(got)
			}()
			require.Eventually(t, func() bool { return node.acquires.Load() >= 8 }, 30*time.Second, time.Millisecond,
				"tried again and again within the first of the minute-long retry delays")
			acquires, releases := node.acquires.Load(), node.releases.Load()
			cl.FinishMigration(t, int(slot), from, to, 10, 0)
			moved := time.Now()
			at, ok := <-got
			require.True(t, ok, "Lock failed")
			t.Logf("%s: %d attempts and %d releases while the slot was split; granted %v after the move", tc.name,
				acquires, releases, at.Sub(moved).Round(time.Microsecond))
			assert.Zero(t, releases, "nothing to undo after TRYAGAIN")
			assert.Less(t, at.Sub(moved), 30*time.Second, "granted on a TRYAGAIN retry, not after a minute-long retry delay")
		})
	}
}
