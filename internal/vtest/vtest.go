// Package vtest runs the lock family's tests in virtual time: in a
// testing/synctest bubble, over an in-process server (package dlmtest), so
// that waits, leases and renewals take no wall time and a test asserts what
// is promised, not how long a busy machine took.
package vtest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// The defaults of a Manager's options (Manager, Over): its TTL, and its
// longest retry delay, Poll, so that a test tells a waiter woken by a
// release (at once) from one that polled (up to Poll later).
const (
	TTL  = 10 * time.Second
	Poll = 2 * time.Second
)

// Run runs f in a synctest bubble with a fresh dlmtest.Server made with
// opts. However f ends, the strategies' and Managers' background work is
// given a minute of virtual time to settle, then the server is closed.
func Run(t *testing.T, f func(t *testing.T, srv *dlmtest.Server), opts ...dlmtest.Option) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer(opts...)
		defer func() {
			time.Sleep(time.Minute)
			srv.Close()
		}()
		f(t, srv)
	})
}

// Manager returns a Manager (TTL, Poll, then opts) over a Single strategy
// on n. A Manager per srv.Node() is a client of its own, as another
// process's, with its own hand-off queue.
func Manager(t testing.TB, n *dlmtest.Node, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	s, err := strategy.NewSingle(n)
	if err != nil {
		t.Fatalf("strategy.NewSingle: %v", err)
	}
	return Over(t, s, opts...)
}

// Over returns a Manager (TTL, Poll, then opts) over s.
func Over(t testing.TB, s driver.Strategy, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	m, err := dlm.New(s, append([]dlm.Option{dlm.WithTTL(TTL), dlm.WithRetryDelay(time.Millisecond, Poll)}, opts...)...)
	if err != nil {
		t.Fatalf("dlm.New: %v", err)
	}
	return m
}

// Async runs take in a goroutine. The channel receives what it took, or
// is closed, the test marked failed, when take returned an error.
func Async[T any](t testing.TB, take func() (T, error)) <-chan T {
	got := make(chan T, 1)
	go func() {
		v, err := take()
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- v
	}()
	return got
}
