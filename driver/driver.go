// Package driver holds the two contracts under a dlm.Manager, for those
// who implement them, in the manner of database/sql/driver: a [Node] is one
// Redis deployment seen through a client library (what a driver implements,
// with what it returns: Call's Reply and Err, [Acks], [ReplyError] and the
// errors below), and a [Strategy] is a locking algorithm over nodes (what
// it grants: [Lease]). It imports only the standard library. The packages
// under driver/ adapt go-redis, redigo, rueidis and valkey-go; package
// strategy holds dlm's three algorithms; package nodekit holds helpers for
// drivers over pipelining clients; package conformance checks a driver or
// a strategy against every rule, which docs/driver-contract.md lists.
package driver

import (
	"context"
	"errors"
	"strings"
	"time"
)

// The errors a driver reports with. Strategies and the Manager match them
// with errors.Is; package dlm exports ErrInvalid and ErrClosed, the two a
// lock user meets, under the same values.
var (
	// ErrNoScript is wrapped by the Err of a Call that ran by EVALSHA when
	// the server does not have the script cached.
	ErrNoScript = errors.New("dlm: NOSCRIPT no matching script")
	// ErrInvalid reports a bad argument or configuration value.
	ErrInvalid = errors.New("dlm: invalid argument")
	// ErrClosed is wrapped by a Call's error once the client the Node wraps
	// was closed, where the driver can tell (go-redis and redigo can; rueidis
	// reports a closed client and an unreachable server with one error).
	ErrClosed = errors.New("dlm: client closed")
	// ErrUnknownMaster reports that the Sentinels asked for a primary do not
	// know its master name: a deployment's configuration names another.
	// Drivers wrap it with the name, and Permanent reports it permanent.
	ErrUnknownMaster = errors.New("dlm: no Sentinel knows the master name")
)

// A Node is one Redis deployment seen through a client library: a single
// server, a primary behind Sentinel, or a Cluster. The packages under
// driver/ adapt go-redis, redigo, rueidis and valkey-go; package conformance
// checks any other implementation.
//
// Each method makes at most one round trip per server it reaches and never
// retries. Methods are safe for concurrent use and honour ctx, including its
// deadline, which must bound the wait for replies even when a server stops
// answering. A Node does not own or close the client it wraps.
//
// Every method is part of the contract, so a wrapper that embeds a Node
// (for metrics, logging or fault injection) keeps all of them. A Node that
// cannot do what RunWait or Watch asks returns an error matching
// errors.ErrUnsupported, and strategies fall back or refuse with that
// reason.
//
// A Node may also implement fmt.Stringer to name itself in errors; drivers
// name a node by its address or master name. Every rule a driver keeps, and
// the helpers of package nodekit, are in docs/driver-contract.md.
type Node interface {
	// Run runs each call's script, pipelined: in one round trip per server
	// the calls' keys live on, in order on each. It sets every call's Reply
	// or Err: a call whose reply did not arrive (the connection broke, ctx
	// ended) gets the error that stopped it, while replies that arrived are
	// kept. An error reply of the server is a *ReplyError (see
	// nodekit.Reply), whatever the client's wording. Run keeps no reference to calls once it returns (a
	// goroutine that outlives it works on a copy).
	Run(ctx context.Context, calls []Call)
	// RunWait runs calls as Run does and then w's command (WAIT or WAITAOF)
	// on the same connection, with no other caller's command in between, and
	// returns its reply. Every call's keys must live on one server. When the
	// calls fail the error is that of the first failed call; when only the
	// wait fails, its error is returned and the calls' replies are kept, so
	// the caller can undo their work.
	RunWait(ctx context.Context, calls []Call, w Wait) (Acks, error)
	// Watch subscribes to channel and returns once the server has confirmed
	// the subscription, so that every message published afterwards reaches
	// notify, which is called with the payload and must not block. On a
	// Redis Cluster of version 7.0 or later, release scripts publish on
	// shard channels (SPUBLISH): a Node over a Cluster client subscribes
	// with SSUBSCRIBE on the master of channel's slot, and again when the
	// slot moves; elsewhere with SUBSCRIBE. stop ends
	// the subscription; calling it again does nothing. Messages may be lost
	// (for example while a connection is re-established), so a caller must
	// not rely on them alone.
	Watch(ctx context.Context, channel string, notify func(payload string)) (stop func(), err error)
}

// A Call is one run of a Lua script on a Node.
//
// The Node sends EVALSHA SHA1 when Source is empty and EVAL Source
// otherwise. Every script replies with an integer or an array of integers,
// which the Node converts to Reply (an integer n to []int64{n}); any other
// reply shape is an error. The Node reports
// NOSCRIPT with an Err that wraps ErrNoScript and returns every other error
// of the client unchanged.
type Call struct {
	SHA1   string   // the script's SHA1 digest, 40 lower-case hex digits
	Source string   // the script's source, to send it with EVAL
	Keys   []string // KEYS
	Args   []string // ARGV
	Reply  []int64  // set by the Node on success: non-nil, empty for an empty array
	Err    error    // set by the Node on failure
}

// A Wait says what RunWait waits for after its script calls: WAIT
// numreplicas timeout, or, with AOF set, WAITAOF numlocal numreplicas
// timeout (Redis 7.2 and later).
type Wait struct {
	// Replicas is the number of replicas to wait for (numreplicas).
	Replicas int
	// Timeout bounds the wait on the server. It is at least 1ms (WAIT 0
	// would block forever) and rounded up to whole milliseconds.
	Timeout time.Duration
	// AOF selects WAITAOF: replicas acknowledge once the write is fsynced
	// to their append-only file, not merely received.
	AOF bool
	// Local, with AOF, also waits for the primary's own fsync (numlocal 1).
	Local bool
}

// Acks is the reply of WAIT or WAITAOF.
type Acks struct {
	// Replicas is the number of replicas that acknowledged.
	Replicas int
	// Local reports, for WAITAOF, that the primary fsynced the write to its
	// append-only file. It is false after WAIT.
	Local bool
}

// A ReplyError is an error reply of a Redis server or Sentinel, in one form
// whatever its client's wording: every driver returns the server's error
// replies as a *ReplyError that wraps its client's own error (so errors.As
// with the client's type still works). Permanent, and everything else in
// dlm, classifies replies by Code and Message, never by a client's text.
// A reply with Code "NOSCRIPT" matches ErrNoScript; "ERR DB index is out
// of range" (SELECT of a database the server does not have) matches
// ErrInvalid, and so is permanent.
type ReplyError struct {
	// Code is the reply's first word: "ERR", "WRONGTYPE", "NOAUTH", ...
	Code string
	// Message is the rest of the reply.
	Message string
	// Err is the client's error for the reply.
	Err error
}

func (e *ReplyError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + " " + e.Message
}

func (e *ReplyError) Unwrap() error { return e.Err }

// Is makes a NOSCRIPT reply match ErrNoScript, and the reply to SELECT of
// a database number the server does not have ("ERR DB index is out of
// range": the number is at or above its databases setting) match
// ErrInvalid: it is a configuration error.
func (e *ReplyError) Is(target error) bool {
	switch target {
	case ErrNoScript:
		return e.Code == "NOSCRIPT"
	case ErrInvalid:
		return e.Code == "ERR" && strings.HasPrefix(e.Message, "DB index is out of range")
	}
	return false
}

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
	// the key the error matches dlm.ErrNotAcquired, and RetryAfter may report how
	// long the holder's lease has left.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// Extend resets the TTL of a lock that token holds. When token does not
	// hold the key the error matches dlm.ErrNotHeld.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// ExtendMany extends each lock as Extend would, in as few round trips
	// as the strategy can, and returns one result per lock in order. Each
	// lease's validity is counted from before the batch was sent. The
	// Manager renews locks with it.
	ExtendMany(ctx context.Context, locks []HeldKey, ttl time.Duration) []ExtendResult
	// Release deletes the lock if token holds it. When token does not hold the
	// key the error matches dlm.ErrNotHeld.
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
	// dlm.ErrNotAcquired, and also dlm.ErrNotHeld when from does not hold key
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
