package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/election"
	"github.com/dlmgo/dlm/fairlock"
	"github.com/dlmgo/dlm/multilock"
	"github.com/dlmgo/dlm/rwlock"
	"github.com/dlmgo/dlm/semaphore"
)

// The lock family, each primitive seen as a Locker over dlm's single
// strategy on go-redis, to compare with the plain lock ("dlm single/goredis")
// in the same run; no Go peer offers them. Shared primitives (a semaphore's
// permit, a read side) join the scenarios where holders never meet (serial,
// distinct); exclusive ones also join the hand-off.
var familyContenders = []Contender{
	family("dlm family: semaphore (4 permits)", false, func(m *dlm.Manager) primitive {
		return primitive{
			try: func(ctx context.Context, key string) (Held, error) {
				s, err := semaphore.New(m, key, 4)
				if err != nil {
					return nil, err
				}
				return held(s.TryAcquire(ctx))
			},
		}
	}),
	family("dlm family: rwlock read (16 readers)", false, func(m *dlm.Manager) primitive {
		return primitive{wait: func(ctx context.Context, key string) (Held, error) {
			rw, err := rwlock.New(m, key, 16)
			if err != nil {
				return nil, err
			}
			return held(rw.RLock(ctx))
		}}
	}),
	family("dlm family: rwlock write (16 readers)", true, func(m *dlm.Manager) primitive {
		return primitive{wait: func(ctx context.Context, key string) (Held, error) {
			rw, err := rwlock.New(m, key, 16)
			if err != nil {
				return nil, err
			}
			return held(rw.Lock(ctx))
		}}
	}),
	family("dlm family: multilock (2 keys)", true, func(m *dlm.Manager) primitive {
		return primitive{
			try: func(ctx context.Context, key string) (Held, error) {
				return held(multilock.TryLock(ctx, m, key, key+":2"))
			},
			wait: func(ctx context.Context, key string) (Held, error) {
				return held(multilock.Lock(ctx, m, key, key+":2"))
			},
		}
	}),
	family("dlm family: fairlock", true, func(m *dlm.Manager) primitive {
		// No try: a fair TryLock is refused while anyone waits, and a waiter
		// that gave up leaves the queue in the background.
		return primitive{wait: func(ctx context.Context, key string) (Held, error) {
			f, err := fairlock.New(m, key)
			if err != nil {
				return nil, err
			}
			return held(f.Lock(ctx))
		}}
	}),
	family("dlm family: election (campaign+resign)", true, func(m *dlm.Manager) primitive {
		return primitive{wait: func(ctx context.Context, key string) (Held, error) {
			e, err := election.New(m, key)
			if err != nil {
				return nil, err
			}
			l, err := e.Campaign(ctx, "bench")
			if err != nil {
				return nil, err
			}
			return resigner{l}, nil
		}}
	}),
}

// A primitive takes a hold on key: try makes one attempt (nil: wait with a
// short deadline instead), wait waits (nil: not offered).
type primitive struct {
	try, wait func(ctx context.Context, key string) (Held, error)
}

// tryWait bounds the attempt of a primitive that has no single attempt of
// its own (a hold made of several locks, a campaign): long enough for a
// write hold's 17 locks when 64 goroutines take them at once.
const tryWait = time.Second

type familyLocker struct {
	p  primitive
	cl closers
}

func (l *familyLocker) TryLock(ctx context.Context, key string) (Held, error) {
	var h Held
	var err error
	if l.p.try != nil {
		h, err = l.p.try(ctx, key)
	} else {
		cctx, cancel := context.WithTimeout(ctx, tryWait)
		h, err = l.p.wait(cctx, key)
		cancel()
	}
	if errors.Is(err, dlm.ErrNotAcquired) && ctx.Err() == nil {
		err = fmt.Errorf("%w: %w", errBusy, err)
	}
	return h, err
}

func (l *familyLocker) Lock(ctx context.Context, key string) (Held, error) {
	if l.p.wait == nil {
		return nil, errors.New("bench: no waiting Lock for this primitive")
	}
	return l.p.wait(ctx, key)
}

func (l *familyLocker) Close() error { return l.cl.Close() }

// family is a contender for one primitive; exclusive ones join the
// hand-off too.
func family(name string, exclusive bool, mk func(*dlm.Manager) primitive) Contender {
	c := dlmContender(name, 1, goredisNode, singleStrategy)
	c.Scenarios = []string{"serial", "distinct"}
	if exclusive {
		c.Scenarios = append(c.Scenarios, "handoff")
	}
	newPlain := c.New
	c.New = func(e Env) (Locker, error) {
		l, err := newPlain(e)
		if err != nil {
			return nil, err
		}
		d := l.(*dlmLocker)
		return &familyLocker{p: mk(d.m), cl: d.cl}, nil
	}
	return c
}

func held[H Held](h H, err error) (Held, error) {
	if err != nil {
		return nil, err
	}
	return h, nil
}

type resigner struct{ l *election.Leadership }

func (r resigner) Unlock(ctx context.Context) error { return r.l.Resign(ctx) }
