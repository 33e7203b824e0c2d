// Package dlm provides distributed locks over Redis for programs that already
// use one of the Go Redis clients.
//
// A lock user needs [New], which makes a [Manager] over a strategy
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
// Under the Manager are the two contracts of package driver. A
// driver.Strategy is a locking algorithm over nodes; a driver.Node is one
// Redis deployment seen through a client library: the packages under
// driver/ adapt go-redis, redigo, rueidis and valkey-go, and package
// conformance checks any other implementation. Around them: package
// inspect shows and revokes locks for operators, an [Observer] (packages
// dlmotel, dlmslog) reports what locks do, and packages semaphore, rwlock,
// multilock, fairlock and election build on a Manager.
package dlm

import (
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
	// ErrHeld reports that a lock was not acquired because another owner
	// holds it; such an error matches ErrNotAcquired too, and RetryAfter
	// reports the holder's remaining TTL when the strategy learned it. A
	// server that lost its data and refuses the key for a while (see
	// strategy.WithMaxTTL) does not report ErrHeld: nobody may hold it.
	ErrHeld = errors.New("dlm: lock held by another owner")
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
