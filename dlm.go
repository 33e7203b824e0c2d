// Package dlm provides distributed locks over Redis for programs that already
// use one of the Go Redis clients.
//
// A lock user needs [New], which makes a [Manager] over a [Strategy]
// (package strategy: single instance, Redlock, failover replicas; package
// config builds one from a URL); [Manager.Lock], which waits for a key, and
// [Manager.TryLock], which tries once; and the [Lock] they return, which
// carries a fencing token ([Lock.Fence]), the time until which its lease
// can be trusted ([Lock.Until], [Lock.Context]), and [Lock.Unlock] (or
// [Lock.UnlockAt], which leaves the key held until a given time). Options:
// [WithTTL], [WithRetryDelay], [WithAutoRenew], [WithOwner], [WithObserver].
//
// The package example (Example, in example_test.go: compiled, and run by go
// test) takes a lock through the single-instance strategy over go-redis:
//
//	single, err := strategy.NewSingle(goredis.New(client))
//	m, err := dlm.New(single, dlm.WithTTL(10*time.Second))
//	lock, err := m.Lock(ctx, "orders:42")
//	defer lock.Unlock(context.WithoutCancel(ctx))
//	// pass lock.Fence() to every storage write the lock protects
//
// Errors wrap the sentinels below, so callers use errors.Is and errors.As,
// never ==. A call that ends because its context ended keeps the context's
// error: errors.Is(err, ErrNotAcquired) and errors.Is(err, context.Canceled)
// both hold.
//
// Under the Manager are two contracts. A [Strategy] is a locking algorithm
// over nodes; a Node (package driver, whose contract it holds) is one
// Redis deployment seen through a client library: the packages under
// driver/ adapt go-redis, redigo, rueidis and valkey-go, and package
// conformance checks any other implementation. Around
// them: package inspect shows and revokes locks for operators, an
// [Observer] (packages dlmotel, dlmslog) reports what locks do, and
// packages semaphore, rwlock, multilock, fairlock and election build on a
// Manager.
package dlm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// Sentinel errors. Every error returned by this module that reports one of
// these conditions matches it with errors.Is.
var (
	// ErrNotAcquired reports that a lock was not acquired: another owner holds
	// it, too few nodes agreed, or the context ended first.
	ErrNotAcquired = errors.New("dlm: lock not acquired")
	// ErrNotHeld reports that an extension or release found the lock held by
	// another owner or not held at all (for example because it expired).
	ErrNotHeld = errors.New("dlm: lock not held")
	// ErrLost is the cause of a Lock's context ending because its lease can no
	// longer be trusted.
	ErrLost = errors.New("dlm: lock lost")
	// ErrInvalid reports a bad argument or configuration value.
	ErrInvalid = driver.ErrInvalid
	// ErrUnlocked is the cause of a Lock's context ending because Unlock or
	// UnlockAt was called.
	ErrUnlocked = errors.New("dlm: lock released")
	// ErrClosed is wrapped by a Call's error once the client the Node wraps
	// was closed, where the driver can tell (go-redis and redigo can; rueidis
	// reports a closed client and an unreachable server with one error).
	ErrClosed = driver.ErrClosed
	// ErrMaxHold is matched, with ErrLost, by the cause of a Lock's context
	// ending because WithAutoRenew's maximum hold time was reached (renewal
	// stopped, or an Extend was refused).
	ErrMaxHold = errors.New("dlm: maximum hold time reached")
	// ErrRevoked reports that an operator revoked the lock (inspect.Revoke,
	// `dlm revoke`). A renewal that finds its lock revoked fails with an
	// error matching both ErrRevoked and ErrNotHeld, and the Lock's context
	// ends with a cause matching ErrLost and ErrRevoked.
	ErrRevoked = errors.New("dlm: lock revoked")
	// ErrStateUnknown reports that too few nodes answered to tell a lock's
	// state (inspect.Revoke).
	ErrStateUnknown = errors.New("dlm: lock state unknown")
)

// A Strategy is a locking algorithm over one or more nodes. Each method makes
// one attempt: it neither sleeps nor retries (the Manager does both), and
// returns within its context's deadline. A failed Acquire undoes its own
// partial work, in the background when the servers are slow to answer (a
// grant whose reply was lost is released once they do), so that nothing
// it did outlives it.
//
// Keys and tokens are opaque, non-empty strings. Acquiring again with the
// token that holds the lock succeeds and refreshes its TTL. After a failed
// Acquire, try again with a new token: the failed attempt's clean-up may
// reach a server after the new attempt and would delete a grant made with
// the same token (the Manager uses a new token for every attempt).
//
// As with Node, every method is part of the contract so that a wrapper keeps
// them all; a strategy that cannot watch releases says so with an error
// matching errors.ErrUnsupported.
type Strategy interface {
	// Acquire takes key for token with the given TTL. When another owner holds
	// the key the error matches ErrNotAcquired, and RetryAfter may report how
	// long the holder's lease has left.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// Extend resets the TTL of a lock that token holds. When token does not
	// hold the key the error matches ErrNotHeld.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// ExtendMany extends each lock as Extend would, in as few round trips
	// as the strategy can, and returns one result per lock in order. Each
	// lease's validity is counted from before the batch was sent. The
	// Manager renews locks with it.
	ExtendMany(ctx context.Context, locks []HeldKey, ttl time.Duration) []ExtendResult
	// Release deletes the lock if token holds it. When token does not hold the
	// key the error matches ErrNotHeld.
	Release(ctx context.Context, key, token string) error
	// WatchRelease calls notify, which must not block, whenever the lock on
	// key may have been released after an acquisition of it was refused (a
	// release nobody waited for need not notify), and returns once
	// notifications are active. The Manager uses it to wake waiting Lock calls within about
	// one round trip of a release. When the strategy's nodes cannot notify,
	// the error matches errors.ErrUnsupported and the Manager polls.
	// Notifications are hints: they may be lost or spurious.
	WatchRelease(ctx context.Context, key string, notify func()) (stop func(), err error)
}

// A Handoff is a Strategy that can pass a lock straight from its holder to
// a new owner. When a lock is unlocked while Lock calls of the same Manager
// wait for its key, the Manager hands it to the first of them with one
// Handoff call instead of a Release followed by the waiter's Acquire, so
// the waiter holds the lock within the Unlock's round trip.
type Handoff interface {
	Strategy
	// Handoff takes key for token to as Acquire does, but only from token
	// from: on every node where it succeeds it ends from's lock and starts
	// to's in one step, with a fence above from's, and a successful
	// Handoff leaves from holding key nowhere. Its error matches
	// ErrNotAcquired, and also ErrNotHeld when from does not hold key
	// (another owner does, or nobody). After a failed Handoff, from may
	// still hold key on some nodes: the caller releases it.
	Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (Lease, error)
}

// A Lease is what a strategy grants.
type Lease struct {
	// Fence is the fencing token: strictly greater than the fence of every
	// acquisition of the same key that completed before this one began.
	Fence uint64
	// Until is the local time, carrying a monotonic clock reading, after which
	// the lease must no longer be trusted. Clock drift is already taken off.
	Until time.Time
}

// A HeldKey names a lock a token holds, for ExtendMany.
type HeldKey struct {
	Key, Token string
}

// An ExtendResult is the outcome of extending one lock of a batch: a new
// lease, or an error as Strategy.Extend would return it.
type ExtendResult struct {
	Lease Lease
	Err   error
}

// RetryAfter reports how long err says to wait before the next attempt: the
// remaining TTL of the lock's holder, when a strategy learned it.
func RetryAfter(err error) (time.Duration, bool) {
	var r interface{ RetryAfter() (time.Duration, bool) }
	if errors.As(err, &r) {
		return r.RetryAfter()
	}
	return 0, false
}

// invalidf returns an error matching ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Permanent reports whether err says that trying again cannot succeed, so
// that Lock returns it at once instead of waiting:
//
//   - an error matching ErrInvalid (which includes the reply "ERR DB index
//     is out of range" to a database number the server does not have),
//     ErrClosed or ErrUnknownMaster;
//   - a *driver.ReplyError in err's tree that refuses the request itself: the
//     codes WRONGTYPE (the lock's key holds a value of another type),
//     NOAUTH, WRONGPASS and NOPERM (authentication and ACLs) and DENIED
//     (protected mode), and code ERR with a message that begins "unknown
//     command" (an endpoint without scripting, such as a Sentinel's port),
//     "AUTH" or "invalid password" (a password the server does not
//     expect), "No such master" (a Sentinel's unknown master name) or
//     "dlm needs Redis" (a server older than dlm's minimum, Redis 6.0,
//     refusing the first acquisition);
//   - an error in err's tree with a method Permanent() bool that reports
//     true; the outermost such method decides (a Redlock quorum error says
//     whether too many nodes failed permanently for a quorum ever to form).
//
// Everything else is transient and Lock keeps waiting: a refused or reset
// connection, a timeout, and the replies LOADING, TRYAGAIN, MOVED, ASK,
// CLUSTERDOWN, READONLY, BUSY, MASTERDOWN, MISCONF and OOM, which the
// deployment can cure by itself or an operator can cure while Lock waits.
// An error reply that is not a *driver.ReplyError (a driver that does not map its
// client's replies) is transient: conformance.RunNode checks that drivers
// map them.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	var p interface{ Permanent() bool }
	if errors.As(err, &p) {
		return p.Permanent()
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) || errors.Is(err, driver.ErrUnknownMaster) {
		return true
	}
	return anyReply(err, permanentReply)
}

// permanentReply reports whether r is a reply that Permanent classifies as
// permanent.
func permanentReply(r *driver.ReplyError) bool {
	switch r.Code {
	case "WRONGTYPE", "NOAUTH", "WRONGPASS", "NOPERM", "DENIED":
		return true
	case "ERR":
		for _, p := range []string{"unknown command", "AUTH", "invalid password", "No such master", "dlm needs Redis"} {
			if strings.HasPrefix(r.Message, p) {
				return true
			}
		}
	}
	return false
}

// anyReply reports whether f holds for a *driver.ReplyError in err's tree.
func anyReply(err error, f func(*driver.ReplyError) bool) bool {
	if r, ok := err.(*driver.ReplyError); ok && f(r) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return anyReply(inner, f)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil && anyReply(e, f) {
				return true
			}
		}
	}
	return false
}
