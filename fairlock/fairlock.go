// Package fairlock provides a lock that serves waiters in arrival order
// across processes, over a strategy whose locks live on one deployment
// (strategy.NewSingle, strategy.NewFailover).
//
// Waiters queue on the server, in a sorted set by arrival number next to
// the lock's own keys (same Cluster hash slot). Only the queue's head tries
// the lock, through the Manager, so the lock itself, its fence, lease,
// renewal and Context are the strategy's, with all it promises; the queue
// only decides who tries. Every waiter renews its place in the queue while
// it waits: its place is a lease of the Manager's TTL, so a waiter that
// died (killed, partitioned, paused) blocks the queue for at most that
// long after its last renewal. A waiter whose context ends leaves the queue
// at once.
//
// The lock is a *dlm.Lock: its UnlockAt keeps the key until a given time,
// and the queue's head takes it once it expires.
//
// Every user of a fair key must take it through this package: a plain
// dlm.Manager.Lock on the same key does not queue and may go first.
//
// Redlock has no fair lock: its masters are independent and cannot agree
// on one arrival order without a consensus protocol of their own, and a
// queue kept on one of them would be lost with it.
//
// A release wakes the waiters at once (the strategy's release
// notifications): the head's refused attempt marks the lock as waited for,
// and so does a holder leaving the queue while others wait in it.
//
// Cost: a waiter calls a queue script on arrival, on each release it is
// notified of, and at least every retry delay (dlm.WithRetryDelay's
// maximum) while it waits, and once to leave; the head's lock attempt is
// the plain lock's.
package fairlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/mgr"
	"github.com/dlmgo/dlm/strategy"
)

//go:embed queue.lua
var queueSource string

var queueScript = eval.NewScript(queueSource)

// A FairLock is a lock on one key that serves waiters in arrival order. It
// is safe for concurrent use; FairLocks of the same key, in any process,
// share one queue.
type FairLock struct {
	m    *dlm.Manager
	node driver.Node
	key  string
	keys []string // queue, deadlines, arrival counter, lock
}

// New returns the fair lock on key, taken through m. m's strategy must keep
// its locks on one deployment (strategy.NewSingle, NewFailover); for any other the error
// matches dlm.ErrInvalid and errors.ErrUnsupported.
func New(m *dlm.Manager, key string) (*FairLock, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: fairlock.New: nil Manager", dlm.ErrInvalid)
	}
	one, ok := mgr.Of(m).Strategy.(mgr.OneDeployment)
	if !ok {
		return nil, fmt.Errorf("%w: fairlock.New: %T keeps its locks on more than one deployment, which cannot agree on one arrival order: %w",
			dlm.ErrInvalid, mgr.Of(m).Strategy, errors.ErrUnsupported)
	}
	if err := mgr.CheckKey(key); err != nil {
		return nil, errs.Within("fairlock.New", err)
	}
	lock, _ := strategy.Keys(key)
	return &FairLock{m: m, node: one.Node(), key: key,
		keys: []string{lock + ":fair:queue", lock + ":fair:deadlines", lock + ":fair:arrivals", lock}}, nil
}

// Key returns the locked key.
func (f *FairLock) Key() string { return f.key }

// position is a waiter's place as the queue script reports it.
type position struct {
	place    int64         // 0: the head
	arrival  uint64        // the waiter's arrival number
	headLeft time.Duration // until the head's place lapses
}

func (f *FairLock) queue(ctx context.Context, token string, leave bool) (position, error) {
	op := "w"
	if leave {
		op = "l"
	}
	r, err := queueScript.Run(ctx, f.node, f.keys, token, msArg(f.m.TTL()), op)
	if err != nil {
		return position{}, errs.Within(fmt.Sprintf("fairlock %q: queue", f.key), err)
	}
	if len(r) != 3 {
		return position{}, fmt.Errorf("dlm: fairlock %q: queue: unexpected reply %v", f.key, r)
	}
	return position{place: r[0], arrival: uint64(r[1]), headLeft: time.Duration(r[2]) * time.Millisecond}, nil
}

func msArg(d time.Duration) string { return fmt.Sprint(max(d.Milliseconds(), 1)) }

// leave takes token out of the queue, in the background when ctx has ended.
func (f *FairLock) leave(ctx context.Context, token string) {
	if ctx.Err() == nil {
		if _, err := f.queue(ctx, token, true); err == nil {
			return
		}
	}
	go func() {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.m.TTL())
		defer cancel()
		_, _ = f.queue(lctx, token, true) // else the place lapses with its lease
	}()
}

// TryLock takes the key when nobody holds it and nobody waits for it.
// Otherwise the error matches dlm.ErrNotAcquired.
func (f *FairLock) TryLock(ctx context.Context) (*dlm.Lock, error) {
	token := mgr.Of(f.m).NewToken()
	pos, err := f.queue(ctx, token, false)
	if err != nil {
		return nil, err
	}
	defer f.leave(ctx, token)
	if pos.place > 0 {
		return nil, fmt.Errorf("%w: fairlock %q: %d waiting before this call", dlm.ErrNotAcquired, f.key, pos.place)
	}
	return f.m.TryLock(ctx, f.key)
}

// Lock joins the key's queue and takes the key when its turn comes, waiting
// until it succeeds or ctx ends (then it leaves the queue, and the error
// matches dlm.ErrNotAcquired and ctx's error). Errors that waiting cannot
// cure (dlm.Permanent) end the wait at once.
func (f *FairLock) Lock(ctx context.Context) (*dlm.Lock, error) {
	l, _, err := f.lock(ctx)
	return l, err
}

// lock is Lock, also returning the waiter's arrival number.
func (f *FairLock) lock(ctx context.Context) (*dlm.Lock, uint64, error) {
	token := mgr.Of(f.m).NewToken()
	poll := mgr.Of(f.m).RetryMax
	poll = min(poll, f.m.TTL()/3)
	released := make(chan struct{}, 1)
	wctx, cancel := context.WithTimeout(ctx, poll) // else poll
	stop, werr := mgr.Of(f.m).Strategy.WatchRelease(wctx, f.key, func() {
		select {
		case released <- struct{}{}:
		default:
		}
	})
	cancel()
	if werr == nil {
		defer stop()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var last error
	for {
		pos, err := f.queue(ctx, token, false)
		wait := poll
		switch {
		case err != nil:
			last = err
		case pos.place == 0:
			l, err := f.m.TryLock(ctx, f.key)
			if err == nil {
				// Leaving may take no more than half the lease: a lost
				// reply would otherwise hand the caller a lock whose
				// validity had ended. The place is then left in the
				// background.
				lctx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Until(l.Until())/2))
				f.leave(lctx, token)
				cancel()
				return l, pos.arrival, nil
			}
			last = err
			if d, ok := dlm.RetryAfter(err); ok {
				wait = min(wait, d+time.Millisecond)
			}
		case pos.place == 1:
			wait = min(wait, pos.headLeft+time.Millisecond) // the head's place lapses then
		}
		if dlm.Permanent(last) || ctx.Err() != nil {
			f.leave(ctx, token)
			if ctx.Err() == nil {
				return nil, 0, last
			}
			if last == nil {
				last = errors.New("not yet at the head of the queue")
			}
			return nil, 0, fmt.Errorf("%w: fairlock %q: %w (%w)", dlm.ErrNotAcquired, f.key, context.Cause(ctx), last)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-released:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}
