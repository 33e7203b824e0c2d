package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"
)

// A Locker is one lock library, configured one way, seen through the
// smallest interface every scenario needs. Implementations are safe for
// concurrent use.
type Locker interface {
	// TryLock makes one attempt; when another owner holds key it returns an
	// error matching errBusy.
	TryLock(ctx context.Context, key string) (Held, error)
	// Lock waits for key until it is acquired or ctx ends, retrying with the
	// shared retry budget of the Env (or the library's own server-woken wait).
	Lock(ctx context.Context, key string) (Held, error)
	// Close releases the clients the Locker made.
	Close() error
}

// A Held lock.
type Held interface {
	Unlock(ctx context.Context) error
}

// Aliver is implemented by a Held lock that knows whether its lease is still
// trusted (libraries that renew: their lock ends when renewal fails).
type Aliver interface {
	Alive() bool
}

// errBusy is matched by TryLock's error when another owner holds the key.
var errBusy = errors.New("bench: lock busy")

// Env is what every contender is built from: the same servers, TTL, per-node
// timeout and retry budget for all.
type Env struct {
	Addrs        []string      // the nodes of the contender's topology (1 or 5)
	TTL          time.Duration // lease length of every lock
	NodeTimeout  time.Duration // bound on one call to one node
	Bounded      bool          // every call bounded by NodeTimeout (Config.Bounded)
	RetryMin     time.Duration // first pause between two attempts of Lock
	RetryMax     time.Duration // longest pause between two attempts of Lock
	PoolSize     int           // connections per node for pooled clients
	RedisVersion string        // e.g. "7.0.15"; "" when unknown
}

// A Contender is one entry of the registry (contenders.go).
type Contender struct {
	Name  string // shown in tables, e.g. "dlm single/goredis"
	Lib   string // "dlm" or the peer library's name; peers are everyone but "dlm"
	Nodes int    // 1 (single-instance) or 5 (independent masters, Redlock)
	// Renews reports that locks stay held without calls from the holder
	// (auto-renewal); only such contenders run the renewal scenario.
	Renews bool
	// Scenarios, when not empty, are the only scenarios the contender joins
	// (a variant that exists for one figure, like dlm with auto-renewal).
	Scenarios []string
	// Note is one line on how the contender is configured, for the results.
	Note string
	New  func(Env) (Locker, error)
}

// joins reports whether c runs scenario s on topology top.
func (c Contender) joins(s Scenario, top Topology) bool {
	return s.Applies(c, top) && (len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, s.Name))
}

// backoff is the retry schedule every peer that polls is given, the same one
// dlm's Manager uses: the pause starts near RetryMin, doubles after each
// refusal up to RetryMax, and is jittered over [d/2, d].
type backoff struct {
	min, max, d time.Duration
}

func newBackoff(e Env) *backoff { return &backoff{min: e.RetryMin, max: e.RetryMax, d: e.RetryMin} }

// Next returns the next pause.
func (b *backoff) Next() time.Duration {
	d := b.d
	b.d = min(2*b.d, b.max)
	return d/2 + rand.N(d/2+1)
}

// NextBackoff implements bsm/redislock's RetryStrategy.
func (b *backoff) NextBackoff() time.Duration { return b.Next() }

// nthBackoff is the same schedule as a function of the attempt number
// (1-based), for libraries that ask that way (redsync).
func nthBackoff(e Env, tries int) time.Duration {
	d := e.RetryMin
	for i := 1; i < tries && d < e.RetryMax; i++ {
		d *= 2
	}
	d = min(d, e.RetryMax)
	return d/2 + rand.N(d/2+1)
}
