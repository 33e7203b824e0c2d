package dlm_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// StressEnv sets the acquisitions per goroutine of TestStressOneKey; the
// issue's full size is DLM_STRESS_PER_GOROUTINE=20000 (8×20,000).
const stressEnv = "DLM_STRESS_PER_GOROUTINE"

type span struct{ from, to time.Time }

// TestStressOneKey has 8 goroutines take one key in turn and checks that no
// waiter waited more than a second in all while the lock was free (between
// one holder's Unlock call and the next holder's Lock return), that the
// lock excluded, and reports the spread of wait times.
func TestStressOneKey(t *testing.T) {
	const workers = 8
	per := 400
	if v := os.Getenv(stressEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, stressEnv)
		per = n
	}
	srv := redistest.Start(t)
	m := newM(t, newSingle(t, goredis.New(ctxClient(t, srv.Addr))), dlm.WithTTL(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	waits := make([][]span, workers) // Lock call to Lock return
	holds := make([][]span, workers) // Lock return to Unlock call
	var inside, overlaps int
	var mu sync.Mutex // checks exclusion only; never held across Lock
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	begin := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws, hs := make([]span, 0, per), make([]span, 0, per)
			defer func() { waits[w], holds[w] = ws, hs }()
			for range per {
				s := time.Now()
				l, err := m.Lock(ctx, "stress")
				if err != nil {
					errs <- err
					return
				}
				got := time.Now()
				mu.Lock()
				inside++
				if inside > 1 {
					overlaps++
				}
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				rel := time.Now()
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
				ws = append(ws, span{s, got})
				hs = append(hs, span{got, rel})
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	assert.Zero(t, overlaps)

	var allHolds, allWaits []span
	for w := range workers {
		allHolds = append(allHolds, holds[w]...)
		allWaits = append(allWaits, waits[w]...)
	}
	require.Len(t, allWaits, workers*per)
	slices.SortFunc(allHolds, func(a, b span) int { return a.from.Compare(b.from) })
	for i := 1; i < len(allHolds); i++ {
		require.False(t, allHolds[i].from.Before(allHolds[i-1].to), "holds overlap")
	}
	// prefix[i] is the total held time of allHolds[:i].
	prefix := make([]time.Duration, len(allHolds)+1)
	for i, h := range allHolds {
		prefix[i+1] = prefix[i] + h.to.Sub(h.from)
	}
	heldBefore := func(at time.Time) time.Duration { // held time in [begin, at)
		i, _ := slices.BinarySearchFunc(allHolds, at, func(h span, at time.Time) int { return h.from.Compare(at) })
		d := prefix[i]
		if i > 0 && allHolds[i-1].to.After(at) {
			d -= allHolds[i-1].to.Sub(at)
		}
		return d
	}
	var maxFree time.Duration
	lengths := make([]time.Duration, len(allWaits))
	for i, w := range allWaits {
		lengths[i] = w.to.Sub(w.from)
		free := lengths[i] - (heldBefore(w.to) - heldBefore(w.from))
		maxFree = max(maxFree, free)
	}
	slices.Sort(lengths)
	q := func(p float64) time.Duration { return lengths[int(p*float64(len(lengths)-1))].Round(time.Microsecond) }
	t.Logf("%d goroutines × %d acquisitions in %v (%.0f/s): wait p50 %v p90 %v p99 %v p99.9 %v max %v; longest time a waiter waited while the lock was free: %v",
		workers, per, elapsed.Round(time.Millisecond), float64(workers*per)/elapsed.Seconds(),
		q(0.5), q(0.9), q(0.99), q(0.999), q(1), maxFree.Round(time.Microsecond))
	assert.Less(t, maxFree, time.Second, "a waiter waited while the lock was free")
}

// TestStressManyManagers has 16 goroutines over 4 Managers (as 4 processes
// would be) take one key in turn, checks exclusion and that nobody waits
// long, and reports the spread of waits.
func TestStressManyManagers(t *testing.T) {
	const managers, per, rounds = 4, 4, 60
	srv := redistest.Start(t)
	var ms []*dlm.Manager
	for range managers {
		ms = append(ms, newM(t, newSingle(t, goredis.New(ctxClient(t, srv.Addr))), dlm.WithTTL(10*time.Second)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	inside, overlaps := 0, 0
	var waits []time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, managers*per)
	for g := range managers * per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				start := time.Now()
				l, err := ms[g%managers].Lock(ctx, "shared")
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				waits = append(waits, time.Since(start))
				inside++
				if inside > 1 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				inside--
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	assert.Zero(t, overlaps)
	slices.Sort(waits)
	q := func(p float64) time.Duration { return waits[int(p*float64(len(waits)-1))].Round(time.Microsecond) }
	t.Logf("%d Managers × %d goroutines × %d acquisitions: wait p50 %v p99 %v max %v",
		managers, per, rounds, q(0.5), q(0.99), q(1))
	assert.Less(t, q(1), 10*time.Second, "longest wait")
}
