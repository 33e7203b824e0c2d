package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
)

// Rules of a strategy's lifecycle methods, ExtendMany and WatchRelease.

func testBatchExtend(t *testing.T, c *strategyCase) {
	const short = time.Second
	mine, theirs := c.key("mine"), c.key("theirs")
	l := c.acquireShort(t, mine, "A", short)
	c.acquireShort(t, theirs, "B", short)
	before := time.Now()
	res := c.ExtendMany(ctx(t), []driver.HeldKey{
		{Key: mine, Token: "A"},
		{Key: theirs, Token: "A"},
		{Key: c.key("never"), Token: "A"},
		{Key: "", Token: "A"},
	}, ttl)
	if len(res) != 4 {
		t.Fatalf("ExtendMany of 4 locks returned %d results", len(res))
	}
	switch r := res[0]; {
	case r.Err != nil:
		t.Errorf("ExtendMany by the holder: %v", r.Err)
	case r.Lease.Fence != l.Fence:
		t.Errorf("ExtendMany changed the fence from %d to %d", l.Fence, r.Lease.Fence)
	case r.Lease.Until.After(before.Add(ttl)):
		t.Errorf("extended Until is %v past the batch's start: later than its TTL %v", r.Lease.Until.Sub(before), ttl)
	case !r.Lease.Until.After(l.Until):
		t.Errorf("ExtendMany to %v did not move Until forward from the %v lease", ttl, short)
	}
	for i, what := range []string{"a key another token holds", "a key never locked"} {
		if err := res[i+1].Err; !errors.Is(err, dlm.ErrNotHeld) {
			t.Errorf("ExtendMany of %s: error %v, want one matching dlm.ErrNotHeld", what, err)
		}
	}
	if err := res[3].Err; !errors.Is(err, dlm.ErrInvalid) {
		t.Errorf("ExtendMany of an empty key: error %v, want one matching dlm.ErrInvalid", err)
	}
	if got := c.ExtendMany(ctx(t), nil, ttl); len(got) != 0 {
		t.Errorf("ExtendMany of no locks returned %d results", len(got))
	}
	time.Sleep(short + 200*time.Millisecond) // past the first TTL, within the extended one
	c.refused(t, mine, "B", ttl, "after A extended it with ExtendMany")
}

func testWatchRelease(t *testing.T, c *strategyCase) {
	k := c.key("k")
	woken := make(chan struct{}, 1)
	stop, err := c.WatchRelease(ctx(t), k, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	skipUnsupported(t, "WatchRelease", err)
	if err != nil {
		t.Fatalf("WatchRelease: %v", err)
	}
	defer stop()
	c.acquire(t, k, "A", ttl)
	c.refused(t, k, "B", ttl, "while A holds it") // B waits: the release must notify
	drain(woken)                                  // a spurious hint is allowed; what counts is the one after the release
	if err := c.Release(ctx(t), k, "A"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-woken:
	case <-time.After(time.Second):
		t.Fatal("a release watched with WatchRelease did not call notify within 1s")
	}
	stop()
	stop() // a second call does nothing

	cx, cancel := context.WithCancel(ctx(t))
	cancel()
	if stop, err := c.WatchRelease(cx, k, func() {}); err == nil {
		stop()
		t.Error("WatchRelease with a cancelled context succeeded")
	}
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
