package rwlock_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/rwlock"
)

// vrw returns the read-write lock name (4 readers) of a new Manager on a
// new Node of srv (a client of its own, as another process's).
func vrw(t *testing.T, srv *dlmtest.Server, name string, opts ...dlm.Option) *rwlock.RWLock {
	t.Helper()
	rw, err := rwlock.New(vtest.Manager(t, srv.Node(), opts...), name, 4)
	require.NoError(t, err)
	return rw
}

// TestReleaseWakesOtherClients: a writer of another client waiting for a
// reader, and readers of other clients waiting for that writer, get in at
// the release they wait for, not at their next poll; the writer's fence
// is above the reader's before it, the readers' fence is the writer's.
func TestReleaseWakesOtherClients(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		r, err := vrw(t, srv, "doc").RLock(ctx)
		require.NoError(t, err)
		writer := vrw(t, srv, "doc")
		wrote := vtest.Async(t, func() (*rwlock.Hold, error) { return writer.Lock(ctx) })
		synctest.Wait()
		released := time.Now()
		require.NoError(t, r.Unlock(ctx))
		w, ok := <-wrote
		require.True(t, ok)
		require.Less(t, time.Since(released), vtest.Poll/10, "the writer learned of the reader's release by polling")
		require.True(t, w.Write())
		require.Greater(t, w.Fence(), r.Fence())

		var readers []<-chan *rwlock.Hold
		for range 2 {
			reader := vrw(t, srv, "doc")
			readers = append(readers, vtest.Async(t, func() (*rwlock.Hold, error) { return reader.RLock(ctx) }))
		}
		synctest.Wait()
		released = time.Now()
		require.NoError(t, w.Unlock(ctx))
		for _, got := range readers {
			h, ok := <-got
			require.True(t, ok)
			require.False(t, h.Write())
			require.Greater(t, h.Fence(), w.Fence())
			require.NoError(t, h.Unlock(ctx))
		}
		require.Less(t, time.Since(released), vtest.Poll/10, "the readers learned of the writer's release by polling")
	})
}

// TestWriterNotStarved: 4 readers of their own clients that always overlap
// (each takes the lock again at once) let a writer in once the readers
// inside when it arrived have left: no reader enters after it arrived.
func TestWriterNotStarved(t *testing.T) {
	const hold = 100 * time.Millisecond
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx, stop := context.WithCancel(context.Background())
		var mu sync.Mutex
		var entered []time.Time
		var wg sync.WaitGroup
		for i := range 4 {
			rw := vrw(t, srv, "doc")
			wg.Go(func() {
				time.Sleep(time.Duration(i) * hold / 4) // staggered: some reader is always inside
				for ctx.Err() == nil {
					h, err := rw.RLock(ctx)
					if err != nil {
						return
					}
					mu.Lock()
					entered = append(entered, time.Now())
					mu.Unlock()
					time.Sleep(hold)
					_ = h.Unlock(context.Background())
				}
			})
		}
		time.Sleep(time.Second)
		asked := time.Now()
		wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w, err := vrw(t, srv, "doc").Lock(wctx)
		require.NoError(t, err, "the writer starved")
		in := time.Now()
		stop()
		require.NoError(t, w.Unlock(context.Background()))
		wg.Wait()
		require.Less(t, in.Sub(asked), 2*hold, "the writer waited for more than the readers inside when it arrived")
		for _, e := range entered {
			if e.After(asked.Add(10*time.Millisecond)) && e.Before(in) {
				t.Errorf("a reader entered %v after the writer arrived, %v before it got in", e.Sub(asked), in.Sub(e))
			}
		}
	})
}

// TestLockEndsWithContext: a writer that cannot get in gives back what it
// took when its context ends (the error matches dlm.ErrNotAcquired and the
// context's), so readers pass the gate again.
func TestLockEndsWithContext(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		r, err := vrw(t, srv, "doc").RLock(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = vrw(t, srv, "doc").Lock(wctx)
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		rctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		r2, err := vrw(t, srv, "doc").RLock(rctx)
		require.NoError(t, err, "the writer that gave up left the gate or a permit held")
		require.NoError(t, r2.Unlock(ctx))
		require.NoError(t, r.Unlock(ctx))
	})
}
