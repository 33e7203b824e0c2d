package redigo

import (
	"slices"
	"testing"
	"time"
)

// idleHas reports whether w waits in idleWatches, after waiting up to a
// second for its goroutine to put it there.
func idleHas(w *watch) bool {
	for range 1000 {
		idleWatches.mu.Lock()
		has := slices.Contains(idleWatches.w, w)
		idleWatches.mu.Unlock()
		if has {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// A watch goes back to the idle list after its call, survives a sweep
// after being taken, and ends at the first sweep it spent idle throughout.
func TestSweepWatches(t *testing.T) {
	w := watchConn(nil, make(chan struct{}))
	w.end()
	if !idleHas(w) {
		t.Fatal("a watch is not idle after its call")
	}
	sweepWatches() // taken since the last sweep: kept
	idleWatches.mu.Lock()
	kept := slices.Contains(idleWatches.w, w)
	idleWatches.mu.Unlock()
	if !kept {
		t.Fatal("a watch taken since the last sweep was ended")
	}
	sweepWatches() // idle throughout: ended
	idleWatches.mu.Lock()
	kept = slices.Contains(idleWatches.w, w)
	idleWatches.mu.Unlock()
	if kept {
		t.Fatal("a watch idle since the last sweep is still kept")
	}
}
