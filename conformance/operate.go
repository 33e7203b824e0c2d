package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/inspect"
)

// testInspectRevoke: what an operator sees and does. Inspect names the
// holder (its owner, since when, its fence) and counts a waiting process;
// Revoke takes the lock away and wakes the waiter: the next holder's fence is above the
// revoked one's by two or more, the revoked holder's next renewal fails
// with dlm.ErrRevoked and its Context ends with that cause, and a fenced
// store then refuses the revoked holder's write. Skipped for a strategy
// that is not an inspect.Inspector.
func testInspectRevoke(t *testing.T, c *strategyCase) {
	if _, ok := c.Strategy.(inspect.Inspector); !ok {
		t.Skipf("%T is not an inspect.Inspector", c.Strategy)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A lease of 3s, renewed every 0.9s: long enough that a renewal a
	// loaded machine makes late does not lose the lease before Revoke
	// (with 1s, the holder's Context ended by its validity running out,
	// not by the revocation).
	const ttl = 3 * time.Second
	key := c.key("inspect")
	holder := c.manager(t, dlm.WithOwner("conformance holder #1"), dlm.WithTTL(ttl), dlm.WithAutoRenew(0.3, time.Minute))
	waiter := c.manager(t, dlm.WithOwner("conformance waiter"), dlm.WithTTL(ttl))

	info, err := inspect.Key(ctx, c.Strategy, key)
	if err != nil || info.Held {
		t.Fatalf("Inspect of a free key: %+v, %v; want not held, no error", info, err)
	}
	before := time.Now()
	l, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer func() { _ = l.Unlock(context.WithoutCancel(ctx)) }()

	// A waiting process is counted (it subscribes to release notices; a
	// strategy whose nodes cannot notify makes it poll, and it is not seen).
	// Revoke wakes it, as a release would.
	waited := lockAsync(ctx, waiter, key)
	checkHolderSeen(t, c, inspectWaiter(t, ctx, c, key), l, before, ttl)

	store := fencedStore{}
	if !store.write(l.Fence()) {
		t.Fatal("the fenced store refused the holder's first write")
	}
	if _, err := inspect.Revoke(ctx, c.Strategy, key, "conformance", "a test revokes it"); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	awaitRevoked(t, l, 2*ttl)
	next := awaitNext(t, waited, 2*ttl)
	defer func() { _ = next.Unlock(context.WithoutCancel(ctx)) }()
	if next.Fence() < l.Fence()+2 {
		t.Fatalf("fence after Revoke %d; want at least the revoked %d + 2", next.Fence(), l.Fence())
	}
	if !store.write(next.Fence()) || store.write(l.Fence()) {
		t.Fatalf("the fenced store accepted the revoked holder's fence %d after %d", l.Fence(), next.Fence())
	}
	checkRevocationNoted(t, ctx, c, key, l.Token())
}

// A lockResult is what a Lock call returned, and when.
type lockResult struct {
	l   *dlm.Lock
	err error
	at  time.Time
}

// lockAsync locks key with m in the background; the channel gets the result.
func lockAsync(ctx context.Context, m *dlm.Manager, key string) <-chan lockResult {
	waited := make(chan lockResult, 1)
	go func() {
		w, err := m.Lock(ctx, key)
		waited <- lockResult{w, err, time.Now()}
	}()
	return waited
}

// inspectWaiter inspects key until it counts a waiter, for up to 2s, and
// returns what it saw last.
func inspectWaiter(t *testing.T, ctx context.Context, c *strategyCase, key string) inspect.Info {
	t.Helper()
	var seen inspect.Info
	var err error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if seen, err = inspect.Key(ctx, c.Strategy, key); err != nil || seen.Waiters > 0 {
			break
		}
	}
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return seen
}

// checkHolderSeen checks that Inspect (seen) names l's holder, locked at
// before with ttl, and has a state for each node.
func checkHolderSeen(t *testing.T, c *strategyCase, seen inspect.Info, l *dlm.Lock, before time.Time, ttl time.Duration) {
	t.Helper()
	switch {
	case !seen.Held || seen.Token != l.Token() || seen.Fence != l.Fence():
		t.Fatalf("Inspect: held %v token %q fence %d; want the holder's token %q and fence %d", seen.Held, seen.Token, seen.Fence, l.Token(), l.Fence())
	case !seen.HolderOK || seen.Holder.Owner != "conformance holder #1" || seen.Holder.TTL != ttl:
		t.Fatalf("Inspect: holder %+v (ok %v); want owner %q, TTL %v", seen.Holder, seen.HolderOK, "conformance holder #1", ttl)
	case seen.Holder.Since.Before(before.Add(-time.Second)) || seen.Holder.Since.After(time.Now().Add(time.Second)):
		t.Fatalf("Inspect: holder since %v; the Lock call began at %v", seen.Holder.Since, before)
	case seen.Remaining <= 0 || seen.Remaining > ttl:
		t.Fatalf("Inspect: remaining %v; want within (0, %v]", seen.Remaining, ttl)
	case len(seen.Nodes) != len(c.faulty):
		t.Fatalf("Inspect: %d node states for %d nodes", len(seen.Nodes), len(c.faulty))
	case seen.Waiters == 0:
		t.Logf("Inspect counted no waiter (the strategy's nodes cannot notify, so waiters poll)")
	}
}

// awaitRevoked checks that l's Context ends within limit, with a cause
// matching dlm.ErrRevoked and dlm.ErrLost.
func awaitRevoked(t *testing.T, l *dlm.Lock, limit time.Duration) {
	t.Helper()
	select {
	case <-l.Context().Done():
	case <-time.After(limit):
		t.Fatalf("the revoked holder's Context did not end within %v", limit)
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, dlm.ErrRevoked) || !errors.Is(cause, dlm.ErrLost) {
		t.Fatalf("the revoked holder's Context ended with %v; want a cause matching dlm.ErrRevoked and dlm.ErrLost", cause)
	}
}

// awaitNext returns the waiter's lock, which it must get within limit of
// Revoke.
func awaitNext(t *testing.T, waited <-chan lockResult, limit time.Duration) *dlm.Lock {
	t.Helper()
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the waiter's Lock after Revoke: %v", r.err)
		}
		return r.l
	case <-time.After(limit):
		t.Fatalf("the waiter did not get the lock within %v of Revoke", limit)
	}
	return nil
}

// checkRevocationNoted checks that Inspect after Revoke finds the
// revocation of token noted on a quorum of nodes.
func checkRevocationNoted(t *testing.T, ctx context.Context, c *strategyCase, key, token string) {
	t.Helper()
	after, err := inspect.Key(ctx, c.Strategy, key)
	if err != nil {
		t.Fatalf("Inspect after Revoke: %v", err)
	}
	noted := 0
	for _, n := range after.Nodes {
		if r := n.Revoked; r != nil && r.Token == token && r.By == "conformance" && r.Reason == "a test revokes it" {
			noted++
		}
	}
	if noted < c.quorum {
		t.Fatalf("Inspect after Revoke: %d nodes keep the revocation note; want at least %d: %+v", noted, c.quorum, after.Nodes)
	}
}

// fencedStore accepts a write whose fence is at least the highest it has
// accepted.
type fencedStore struct{ highest uint64 }

func (s *fencedStore) write(fence uint64) bool {
	if fence < s.highest {
		return false
	}
	s.highest = fence
	return true
}

// manager returns a Manager over the case's strategy.
func (c *strategyCase) manager(t *testing.T, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	m, err := dlm.New(c.Strategy, append([]dlm.Option{dlm.WithRetryDelay(time.Millisecond, 50*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("dlm.New: %v", err)
	}
	return m
}
