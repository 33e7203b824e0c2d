package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	rsredigo "github.com/go-redsync/redsync/v4/redis/redigo"
	rsrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
	"github.com/redis/rueidis/rueidislock"
)

// ---- redsync ----

// redsyncContender is redsync v4 over one pool per node, made by pool.
// failFast is redsync's WithFailFast: return as soon as a quorum answered.
func redsyncContender(name string, nodes int, failFast bool, pool func(addr string, e Env) (rsredis.Pool, func() error, error)) Contender {
	note := "expiry=TTL, timeoutFactor=NodeTimeout/TTL, retry delay = the shared backoff, tries unbounded (ctx bounds the wait)"
	if failFast {
		note += ", WithFailFast(true)"
	}
	return Contender{Name: name, Lib: "redsync", Nodes: nodes, Note: note, New: func(e Env) (Locker, error) {
		pools, cl, err := perNode(e, pool)
		if err != nil {
			return nil, err
		}
		opts := []redsync.Option{
			redsync.WithExpiry(e.TTL),
			redsync.WithTimeoutFactor(float64(e.NodeTimeout) / float64(e.TTL)),
			redsync.WithTries(math.MaxInt32),
			redsync.WithRetryDelayFunc(func(tries int) time.Duration { return nthBackoff(e, tries) }),
		}
		if failFast {
			opts = append(opts, redsync.WithFailFast(true))
		}
		return &redsyncLocker{rs: redsync.New(pools...), opts: opts, cl: cl}, nil
	}}
}

func redsyncGoredis(addr string, e Env) (rsredis.Pool, func() error, error) {
	c := newGoredis(addr, e)
	return rsgoredis.NewPool(c), c.Close, nil
}

func redsyncRedigo(addr string, e Env) (rsredis.Pool, func() error, error) {
	p := newRedigo(addr, e)
	return rsredigo.NewPool(p), p.Close, nil
}

func redsyncRueidis(addr string, e Env) (rsredis.Pool, func() error, error) {
	c, err := newRueidis(addr, e)
	if err != nil {
		return nil, nil, err
	}
	return rsrueidis.NewPool(rueidiscompat.NewAdapter(c)), func() error { c.Close(); return nil }, nil
}

type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
	cl   closers
}

func (l *redsyncLocker) TryLock(ctx context.Context, key string) (Held, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		return nil, redsyncErr(err)
	}
	return redsyncHeld{m}, nil
}

func (l *redsyncLocker) Lock(ctx context.Context, key string) (Held, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, redsyncErr(err)
	}
	return redsyncHeld{m}, nil
}

func (l *redsyncLocker) Close() error { return l.cl.Close() }

// redsyncErr maps "held by someone else" to errBusy and keeps node errors.
func redsyncErr(err error) error {
	var re *redsync.RedisError
	if errors.As(err, &re) {
		return err
	}
	return fmt.Errorf("%w: %w", errBusy, err)
}

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if !ok && err == nil {
		err = errors.New("redsync: unlock reached no quorum")
	}
	return err
}

// ---- bsm/redislock ----

func bsmContender(name string) Contender {
	return Contender{Name: name, Lib: "bsm/redislock", Nodes: 1,
		Note: "go-redis v9 client; retry strategy = the shared backoff",
		New: func(e Env) (Locker, error) {
			c := newGoredis(e.Addrs[0], e)
			return &bsmLocker{c: redislock.New(c), env: e, close: c.Close}, nil
		}}
}

type bsmLocker struct {
	c     *redislock.Client
	env   Env
	close func() error
}

// bounded is ctx bounded by the per-node timeout when the run bounds every
// call (Config.Bounded): bsm/redislock has no timeout of its own.
func (l *bsmLocker) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.env.Bounded {
		return context.WithTimeout(ctx, l.env.NodeTimeout)
	}
	return ctx, func() {}
}

func (l *bsmLocker) TryLock(ctx context.Context, key string) (Held, error) {
	ctx, cancel := l.bounded(ctx)
	defer cancel()
	lk, err := l.c.Obtain(ctx, key, l.env.TTL, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		err = fmt.Errorf("%w: %w", errBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return bsmHeld{lk, l}, nil
}

func (l *bsmLocker) Lock(ctx context.Context, key string) (Held, error) {
	lk, err := l.c.Obtain(ctx, key, l.env.TTL, &redislock.Options{RetryStrategy: newBackoff(l.env)})
	if err != nil {
		return nil, err
	}
	return bsmHeld{lk, l}, nil
}

func (l *bsmLocker) Close() error { return l.close() }

// bsmHeld adapts *redislock.Lock, whose method is Release.
type bsmHeld struct {
	l  *redislock.Lock
	by *bsmLocker
}

func (h bsmHeld) Unlock(ctx context.Context) error {
	ctx, cancel := h.by.bounded(ctx)
	defer cancel()
	return h.l.Release(ctx)
}

// ---- rueidislock ----

// rueidislockContender is rueidislock taking a majority of 2×majority−1
// keys per lock on one server. With majority 1 it sets one key per lock and
// does the same work on the server as the other single-instance contenders;
// its default is 2 (three keys). It waits by client-side-caching
// invalidation, not by polling, and renews every held lock at TTL/2.
func rueidislockContender(name string, majority int32) Contender {
	return Contender{Name: name, Lib: "rueidislock", Nodes: 1, Renews: true,
		Note: fmt.Sprintf("KeyMajority=%d (keys per lock: %d), KeyValidity=TTL, TryNextAfter=NodeTimeout, ExtendInterval=TTL/2 (default), "+
			"NoLoopTracking on Redis >= 7.0.5; waits on invalidations, renews by itself", majority, 2*majority-1),
		New: func(e Env) (Locker, error) {
			lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
				ClientOption:   rueidis.ClientOption{InitAddress: []string{e.Addrs[0]}},
				KeyValidity:    e.TTL,
				TryNextAfter:   e.NodeTimeout,
				KeyMajority:    majority,
				NoLoopTracking: versionAtLeast(e.RedisVersion, 7, 0, 5),
			})
			if err != nil {
				return nil, err
			}
			return &rueidisLocker{l: lk}, nil
		}}
}

type rueidisLocker struct{ l rueidislock.Locker }

// A rueidislock lock lives as long as the context it was taken with, and its
// lease is cut short to that context's deadline, so a lock is not taken with
// the caller's ctx (which bounds only the call).
//
// TryLock passes context.Background(): rueidislock bounds one attempt by
// TryNextAfter per key itself, so nothing is added to its cost.
func (l *rueidisLocker) TryLock(ctx context.Context, key string) (Held, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	held, release, err := l.l.TryWithContext(context.Background(), key)
	if err != nil {
		return nil, rueidisErr(err)
	}
	return &rueidisHeld{ctx: held, release: release}, nil
}

// Lock waits with a context of its own, cancelled if ctx ends first.
func (l *rueidisLocker) Lock(ctx context.Context, key string) (Held, error) {
	lctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	held, release, err := l.l.WithContext(lctx, key)
	if !stop() && err == nil {
		release()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, rueidisErr(err)
	}
	return &rueidisHeld{ctx: held, release: release, cancel: cancel}, nil
}

func rueidisErr(err error) error {
	if errors.Is(err, rueidislock.ErrNotLocked) {
		return fmt.Errorf("%w: %w", errBusy, err)
	}
	return err
}

func (l *rueidisLocker) Close() error { l.l.Close(); return nil }

type rueidisHeld struct {
	ctx     context.Context
	release context.CancelFunc
	cancel  context.CancelFunc // nil after TryLock
}

// Unlock releases the lock; rueidislock's release function waits until the
// key is deleted.
func (h *rueidisHeld) Unlock(context.Context) error {
	lost := h.ctx.Err() != nil
	h.release()
	if h.cancel != nil {
		h.cancel()
	}
	if lost {
		return errors.New("rueidislock: lock was lost before unlock")
	}
	return nil
}

func (h *rueidisHeld) Alive() bool { return h.ctx.Err() == nil }

// versionAtLeast reports whether a dotted version is at least maj.min.patch.
func versionAtLeast(v string, want ...int) bool {
	parts := strings.Split(v, ".")
	for i, w := range want {
		if i >= len(parts) {
			return false
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return false
		}
		if n != w {
			return n > w
		}
	}
	return true
}
