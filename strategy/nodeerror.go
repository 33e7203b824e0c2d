package strategy

import (
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/errs"

	"github.com/dlmgo/dlm"
)

// nodeError reports the failure of one operation on one node.
type nodeError struct {
	Node string // the node's name: its String method, or its position
	Op   string // "acquire", "extend", "release", ...
	Err  error
}

func (e *nodeError) Error() string {
	return "dlm: " + e.Op + " on " + e.Node + ": " + errs.Cause(e.Err)
}
func (e *nodeError) Unwrap() error { return e.Err }

// RetryAfter reports a short wait when the node refused the call before
// running it because its keys' Cluster hash slot is being moved between
// masters (a TRYAGAIN reply): 10ms, for the move may end at any moment.
func (e *nodeError) RetryAfter() (time.Duration, bool) {
	var r *driver.ReplyError
	if errors.As(e.Err, &r) && r.Code == "TRYAGAIN" {
		return slotMovingRetry, true
	}
	return 0, false
}

// slotMovingRetry is how long nodeError.RetryAfter says to wait after a
// TRYAGAIN reply.
const slotMovingRetry = 10 * time.Millisecond

// heldError reports that another owner holds a key, or that its server
// quarantines it.
type heldError struct {
	Key string
	// Remaining is the holder's remaining TTL as the server reported it, or a
	// negative value when unknown.
	Remaining time.Duration
	// Quarantined reports that the server lost the key's state and grants
	// nothing for Remaining more: an owner it forgot may still hold the key
	// (see WithMaxTTL).
	Quarantined bool
}

func (e *heldError) Error() string {
	if e.Quarantined {
		return fmt.Sprintf("dlm: lock not acquired: %q may be held by an owner its server forgot after losing its data: quarantined for %v more", e.Key, e.Remaining)
	}
	if e.Remaining < 0 {
		return fmt.Sprintf("dlm: lock not acquired: %q is held by another owner", e.Key)
	}
	return fmt.Sprintf("dlm: lock not acquired: %q is held by another owner for %v more", e.Key, e.Remaining)
}

// Is makes a heldError match dlm.ErrNotAcquired, and dlm.ErrHeld unless
// the server refused for a quarantine.
func (e *heldError) Is(target error) bool {
	return target == dlm.ErrNotAcquired || target == dlm.ErrHeld && !e.Quarantined
}

// RetryAfter reports the holder's remaining TTL when known.
func (e *heldError) RetryAfter() (time.Duration, bool) { return e.Remaining, e.Remaining >= 0 }
