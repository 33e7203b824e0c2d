// Package mgr gives the primitives built on a dlm.Manager (packages
// semaphore, multilock, rwlock, fairlock, election) what the Manager keeps
// to itself. Package dlm fills it when it is initialized; this package
// imports nothing of the module but package driver, so that dlm can.
package mgr

import (
	"context"
	"strconv"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// Manager is what the family needs of one *dlm.Manager.
type Manager struct {
	// Strategy is the driver.Strategy the Manager takes locks through.
	Strategy Strategy
	// NewToken returns a token for an acquisition beginning now, carrying
	// the Manager's owner as its own locks' tokens do.
	NewToken func() string
	// RetryMin and RetryMax bound the pause between attempts
	// (dlm.WithRetryDelay).
	RetryMin, RetryMax time.Duration
}

var (
	// Of returns what m, a *dlm.Manager, keeps for the family.
	Of func(m any) Manager
	// CheckKey returns an error matching dlm.ErrInvalid when key cannot
	// name a lock.
	CheckKey func(key string) error
)

// Strategy is the method of driver.Strategy the family calls; assert
// driver.Strategy (or another interface) for more.
type Strategy interface {
	WatchRelease(ctx context.Context, key string, notify func()) (stop func(), err error)
}

// OneDeployment is a strategy whose locks all live on one Redis
// deployment, reached through Node: package strategy's Single and
// Failover. Primitives that need one order of events there (packages
// fairlock and election) require it.
type OneDeployment interface {
	driver.Strategy
	Node() driver.Node
}

// LockValue returns what the key of a lock held by token with the given
// fence holds on the servers of package strategy's Single and Failover, "<fence>:<token>",
// for scripts of primitives built beside the lock (package election) that
// check a lock is still held. Once an acquisition was refused on the lock,
// the key holds "0" followed by LockValue: such scripts compare without it.
func LockValue(fence uint64, token string) string {
	return strconv.FormatUint(fence, 10) + ":" + token
}
