// Package mgr gives the primitives built on a dlm.Manager (packages
// semaphore, multilock, rwlock, fairlock, election) what the Manager keeps
// to itself. Package dlm fills it when it is initialized; this package
// imports nothing of the module, so that dlm can.
package mgr

import (
	"context"
	"time"
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
