package redistest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ContendResult is what Contend saw.
type ContendResult struct {
	MaxHolders int32    // most goroutines inside the critical section at once
	Counter    int      // the shared counter: exact only when no update was lost
	Fences     []uint64 // the holders' fences, in the order their critical sections ran
}

// Contend runs workers goroutines that each take a lock rounds times with
// lock, which returns the lock's fence and the function that releases it.
// In the critical section each reads a shared counter, sleeps hold and
// writes it back incremented, so two holders at once lose an update. An
// error from lock or unlock fails t and ends that goroutine.
func Contend(t testing.TB, workers, rounds int, hold time.Duration, lock func() (fence uint64, unlock func() error, err error)) ContendResult {
	t.Helper()
	var (
		res     ContendResult
		holders atomic.Int32
		maxHeld atomic.Int32
		mu      sync.Mutex // guards res.Fences, not the counter
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for range rounds {
				fence, unlock, err := lock()
				if err != nil {
					errs <- err
					return
				}
				if h := holders.Add(1); h > maxHeld.Load() {
					maxHeld.Store(h)
				}
				mu.Lock()
				res.Fences = append(res.Fences, fence)
				mu.Unlock()
				v := res.Counter // guarded only by the lock under test
				time.Sleep(hold)
				res.Counter = v + 1
				holders.Add(-1)
				if err := unlock(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res.MaxHolders = maxHeld.Load()
	return res
}
