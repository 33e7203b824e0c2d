// Package giveback releases the locks a primitive took on its way to a
// hold it then gave up (packages semaphore, multilock, rwlock).
package giveback

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
)

// Locks releases locks (nil ones skipped) all at once and returns when every
// release has ended, after at most ttl (the locks' TTL: by then their leases
// have run out anyway), even when ctx has ended. So a caller that gave up
// and then exits leaves nothing held. The error, nil when every lock was
// released or had already expired, says which releases failed; the leases
// of those run out within their TTL.
func Locks(ctx context.Context, ttl time.Duration, locks ...*dlm.Lock) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	failed := make([]error, len(locks))
	var wg sync.WaitGroup
	for i, l := range locks {
		if l == nil {
			continue
		}
		wg.Go(func() {
			if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlm.ErrNotHeld) {
				failed[i] = errs.Within(strconv.Quote(l.Key()), err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(failed...); err != nil {
		return errs.Within("giving back what it took failed (the leases run out within their TTL)", err)
	}
	return nil
}

// Wrap returns err, the reason a caller gave up, with the failure to give
// back, if any, appended as text: err's kinds (errors.Is) stay those of the
// reason.
func Wrap(err, givenBack error) error {
	if givenBack == nil {
		return err
	}
	return fmt.Errorf("%w; %v", err, givenBack)
}
