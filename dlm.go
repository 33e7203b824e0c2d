// Package dlm provides distributed locks over Redis for programs that already
// use one of the Go Redis clients.
//
// The package is built from two small interfaces. A [Node] is one Redis
// deployment seen through a client library; the packages under driver/ adapt
// go-redis, redigo and rueidis, and package conformance proves any other
// implementation keeps the same rules. A [Strategy] is a locking algorithm
// over nodes; package strategy provides single-instance, Redlock and
// failover-replica strategies. A [Manager] turns a strategy into locks: it
// makes tokens, retries and waits, and hands out a [Lock] that carries a
// fencing token and the time until which its lease can be trusted.
//
//	m, err := dlm.New(strategy.NewSingle(goredis.New(client)))
//	lock, err := m.Lock(ctx, "orders:42")
//	if err != nil { ... }
//	defer lock.Unlock(context.WithoutCancel(ctx))
//	// pass lock.Fence() to every storage write the lock protects
//
// Errors wrap the sentinels below, so callers use errors.Is and errors.As,
// never ==. A call that ends because its context ended keeps the context's
// error: errors.Is(err, ErrNotAcquired) and errors.Is(err, context.Canceled)
// both hold.
package dlm

import (
	"context"
	"errors"
	"fmt"
	"time"
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
	// ErrNoScript is wrapped by a Node's EvalSHA error when the server does
	// not have the script cached.
	ErrNoScript = errors.New("dlm: NOSCRIPT no matching script")
	// ErrInvalid reports a bad argument or configuration value.
	ErrInvalid = errors.New("dlm: invalid argument")
	// ErrUnlocked is the cause of a Lock's context ending because Unlock was
	// called.
	ErrUnlocked = errors.New("dlm: lock released")
)

// A Node is one Redis deployment seen through a client library: a single
// server, a primary behind Sentinel, or a Cluster.
//
// Each method makes one round trip and never retries. Methods are safe for
// concurrent use and honour ctx, including its deadline, which must bound the
// wait for the reply even when the server stops answering. A Node does not
// own or close the client it wraps.
//
// Every script run through a Node replies with an array of integers; the
// Node converts the reply to []int64 and reports any other reply shape as an
// error. Drivers return the client's errors unchanged except NOSCRIPT, which
// EvalSHA wraps with [ErrNoScript].
//
// A Node may also implement fmt.Stringer to name itself in errors.
type Node interface {
	// EvalSHA runs EVALSHA with the script's SHA1 digest (40 lower-case hex digits).
	EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error)
	// Eval runs EVAL with the script's source.
	Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error)
}

// NodeName names n for errors and logs: its String method when it has one,
// otherwise its position among the nodes of a strategy.
func NodeName(n Node, index int) string {
	if s, ok := n.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("node[%d]", index)
}

// A Strategy is a locking algorithm over one or more nodes. Each method makes
// one attempt: it neither sleeps nor retries (the Manager does both). A
// strategy undoes its own partial work before it returns an error.
//
// Keys and tokens are opaque, non-empty strings. Acquiring again with the
// token that holds the lock succeeds and refreshes its TTL, so a caller whose
// reply was lost may simply retry.
type Strategy interface {
	// Acquire takes key for token with the given TTL. When another owner holds
	// the key the error matches ErrNotAcquired, and RetryAfter may report how
	// long the holder's lease has left.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// Extend resets the TTL of a lock that token holds. When token does not
	// hold the key the error matches ErrNotHeld.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// Release deletes the lock if token holds it. When token does not hold the
	// key the error matches ErrNotHeld.
	Release(ctx context.Context, key, token string) error
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

// NodeError reports the failure of one operation on one node.
type NodeError struct {
	Node string // the node's name, see NodeName
	Op   string // "acquire", "extend", "release", ...
	Err  error
}

func (e *NodeError) Error() string { return "dlm: " + e.Op + " on " + e.Node + ": " + e.Err.Error() }
func (e *NodeError) Unwrap() error { return e.Err }

// HeldError reports that another owner holds a key. It matches ErrNotAcquired.
type HeldError struct {
	Key string
	// Remaining is the holder's remaining TTL as the server reported it, or a
	// negative value when unknown.
	Remaining time.Duration
}

func (e *HeldError) Error() string {
	if e.Remaining < 0 {
		return fmt.Sprintf("dlm: lock not acquired: %q is held by another owner", e.Key)
	}
	return fmt.Sprintf("dlm: lock not acquired: %q is held by another owner for %v more", e.Key, e.Remaining)
}

func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// RetryAfter reports the holder's remaining TTL when known.
func (e *HeldError) RetryAfter() (time.Duration, bool) { return e.Remaining, e.Remaining >= 0 }

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
