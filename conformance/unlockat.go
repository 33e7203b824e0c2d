package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/inspect"
)

// testUnlockAt: a Manager's Lock.UnlockAt over the strategy leaves the key
// held until at, through the strategy's Extend with a TTL shorter than the
// lease's. The Lock's Context ends at once; another process's TryLock is
// refused before at, and (over one node) the holder's remaining TTL its
// refusal reports (dlm.RetryAfter) is within the time left; a Lock call of the same
// Manager gets the key only once at has passed; and, for an
// inspect.Inspector, the servers' TTL of the holder's lock stays within
// the time left (no renewal lengthens it again) until the key is gone.
// Assertions that need a moment before at are skipped, and logged, when
// the machine was too slow to make them in time.
func testUnlockAt(t *testing.T, c *strategyCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const (
		ttl  = 2 * time.Second
		hold = 500 * time.Millisecond
	)
	key := c.key("unlockat")
	holder := c.manager(t, dlm.WithTTL(ttl), dlm.WithAutoRenew(0.1, time.Minute)) // renews every 200ms
	other := c.manager(t, dlm.WithTTL(ttl))
	l, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	lctx := l.Context()
	waited := lockAsync(ctx, holder, key)

	at := time.Now().Add(hold)
	sent := time.Now()
	if err := l.UnlockAt(ctx, at); err != nil {
		t.Fatalf("UnlockAt(now+%v): %v", hold, err)
	}
	// The servers count the TTL UnlockAt gives from when its call reaches
	// them, up to as long as the call took after at was read: a loaded
	// machine's slow call leaves the key that much past at (a round
	// trip's 100ms at least).
	slack := max(100*time.Millisecond, time.Since(sent))
	if err := lctx.Err(); err == nil {
		t.Error("the Lock's Context had not ended when UnlockAt returned")
	} else if cause := context.Cause(lctx); !errors.Is(cause, dlm.ErrUnlocked) {
		t.Errorf("the Lock's Context ended with %v; want dlm.ErrUnlocked", cause)
	}
	checkRefusedBeforeAt(t, ctx, c, other, key, at, slack)
	if _, ok := c.Strategy.(inspect.Inspector); ok {
		checkTTLRunsOut(t, ctx, c, key, l.Token(), at, slack)
	}
	select {
	case r := <-waited:
		checkNextAfterAt(t, ctx, r, l, at)
	case <-ctx.Done():
		t.Fatal("the same Manager's waiting Lock did not get the key after at")
	}
}

// checkRefusedBeforeAt checks that other's TryLock of key before at is
// refused, and (over one node) told a holder's TTL within the time left
// and slack.
func checkRefusedBeforeAt(t *testing.T, ctx context.Context, c *strategyCase, other *dlm.Manager, key string, at time.Time, slack time.Duration) {
	t.Helper()
	tried := time.Now()
	_, err := other.TryLock(ctx, key)
	switch before := time.Now().Before(at); {
	case err == nil && before:
		t.Fatal("another Manager's TryLock was granted before at")
	case err == nil:
		t.Log("another Manager's TryLock came after at (a slow machine): the refusal before at is not checked")
	case !errors.Is(err, dlm.ErrNotAcquired):
		t.Errorf("another Manager's TryLock before at: error %v does not match dlm.ErrNotAcquired", err)
	}
	// The holder's remaining TTL, where the refusal reports it, is within
	// the time left until at (with UnlockAt's slack). Not with a
	// quorum of several nodes: a minority may keep the old TTL (the
	// extension had not reached it yet, or it was down), and a refusal
	// decided by the first nodes to answer may report theirs.
	if left, ok := dlm.RetryAfter(err); ok && c.quorum == len(c.faulty) && left > at.Sub(tried)+slack {
		t.Fatalf("another Manager's TryLock %v before at was told the holder's TTL is %v: the key was not left to expire at at", at.Sub(tried), left)
	}
}

// checkTTLRunsOut inspects key until it is gone or someone else's: every
// look finds the lock of token with a TTL within the time left until at,
// and slack, and decreasing (a renewal would have reset it to the
// Manager's TTL), and the key stays until at.
func checkTTLRunsOut(t *testing.T, ctx context.Context, c *strategyCase, key, token string, at time.Time, slack time.Duration) {
	t.Helper()
	seen := 0
	for {
		now := time.Now()
		info, err := inspect.Key(ctx, c.Strategy, key)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		if !info.Held || info.Token != token {
			break
		}
		seen++
		if left := at.Sub(now) + slack; info.Remaining > left {
			t.Fatalf("the servers' TTL is %v, %v before at: more than the time left (a renewal lengthened it?)", info.Remaining, at.Sub(now))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if gone := time.Now(); gone.Before(at) {
		t.Fatalf("the key was free or another's %v before at", at.Sub(gone))
	}
	if seen == 0 {
		t.Log("the first look came after the key had gone (a slow machine)")
	}
}

// checkNextAfterAt checks the same Manager's waiting Lock (r): it got the
// key once at had passed, with a fence above l's, and l's Unlock after
// UnlockAt reports dlm.ErrNotHeld without ending the next holder's lock.
func checkNextAfterAt(t *testing.T, ctx context.Context, r lockResult, l *dlm.Lock, at time.Time) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("the same Manager's waiting Lock: %v", r.err)
	}
	defer func() { _ = r.l.Unlock(context.WithoutCancel(ctx)) }()
	if r.at.Before(at) {
		t.Fatalf("the same Manager's waiting Lock got the key %v before at", at.Sub(r.at))
	}
	if r.l.Fence() <= l.Fence() {
		t.Errorf("the next holder's fence %d is not above %d", r.l.Fence(), l.Fence())
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlm.ErrNotHeld) {
		t.Errorf("Unlock after UnlockAt: %v; want an error matching dlm.ErrNotHeld", err)
	}
	if err := r.l.Context().Err(); err != nil {
		t.Errorf("Unlock after UnlockAt ended the next holder's lock: %v", context.Cause(r.l.Context()))
	}
}
