// Package fencing makes a lock's fence part of the write it protects: the
// store records the largest fence it has seen for a resource and refuses, in
// the same atomic step as the write, a write carrying a smaller one. A
// holder that paused past its lease (GC, swap, a partition) and writes late
// is refused by the store, not by the lock.
//
// Three stores:
//
//   - SQL (database/sql, PostgreSQL): [SQL.Check] records the fence inside
//     the caller's transaction with one upsert, and the transaction fails
//     with [ErrStale] when a larger fence was recorded first.
//   - Redis data: [Redis.Set], [Redis.Del] and [Redis.HSet] write a key and
//     check the fence in one script, over any driver.Node, Cluster included.
//   - HTTP: [SetHeader] or [Transport] send a lock's key and fence with a
//     request; [Middleware] refuses a request whose fence is smaller than
//     the largest seen for its key (409 Conflict), the record kept in a
//     [Store] (SQL or Redis).
//
// A fence equal to the recorded one is accepted: a holder writes many times
// with its fence, and dlm never hands the same fence for one key to two
// acquisitions. Use the lock's key ([dlm.Lock.Key]) as the resource, so
// that fences from one counter are compared.
//
// Every error from bad input matches dlm.ErrInvalid; a refused write
// matches ErrStale. See docs/fencing.md.
package fencing

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/dlmgo/dlm"
)

// ErrStale reports a write refused because a larger fence was recorded
// first for its resource: its lock was lost and taken by another holder.
var ErrStale = errors.New("dlm: fencing: stale fence: a larger fence was recorded first")

// MaxResource is the longest resource name accepted, in bytes.
const MaxResource = 1024

// A Store records the largest fence seen per resource.
type Store interface {
	// Advance records fence for resource unless a larger fence is recorded,
	// in one atomic step; then it returns an error matching ErrStale.
	Advance(ctx context.Context, resource string, fence uint64) error
}

// check validates a resource name and a fence: the name is 1 to
// MaxResource bytes of UTF-8 without NUL (a PostgreSQL TEXT refuses NUL and
// invalid UTF-8), the fence is above 0 (dlm's fences start at 1).
func check(resource string, fence uint64) error {
	switch {
	case fence == 0:
		return fmt.Errorf("%w: fencing: fence 0 (fences start at 1)", dlm.ErrInvalid)
	case resource == "":
		return fmt.Errorf("%w: fencing: empty resource name", dlm.ErrInvalid)
	case len(resource) > MaxResource:
		return fmt.Errorf("%w: fencing: resource name of %d bytes, above MaxResource (%d)", dlm.ErrInvalid, len(resource), MaxResource)
	case !utf8.ValidString(resource):
		return fmt.Errorf("%w: fencing: resource name is not valid UTF-8", dlm.ErrInvalid)
	}
	for i := 0; i < len(resource); i++ {
		if resource[i] == 0 {
			return fmt.Errorf("%w: fencing: resource name contains NUL", dlm.ErrInvalid)
		}
	}
	return nil
}
