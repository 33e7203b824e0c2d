package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	rueidisdrv "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/strategy"
)

// A NodeFactory makes one driver.Node over a new client to addr, and the
// function that closes the client.
type NodeFactory func(addr string, e Env) (driver.Node, func() error, error)

// A StrategyFactory builds a dlm strategy over the nodes of a topology.
type StrategyFactory func(nodes []driver.Node, e Env) (driver.Strategy, error)

// dlmContender is dlm's Manager over strategy strat on nodes made by node.
// opts adds Manager options (auto-renewal) beyond the shared TTL and retry
// budget, which every dlm contender gets.
func dlmContender(name string, nodes int, node NodeFactory, strat StrategyFactory, opts ...func(Env) dlm.Option) Contender {
	note := "WithTTL(TTL), WithRetryDelay(RetryMin, RetryMax); strategy.NewSingle(node) as the README's first lock: no WithTimeout, so the caller's context and the client's timeouts bound a call, as for bsm/redislock and rueidislock"
	if nodes > 1 {
		note = "WithTTL(TTL), WithRetryDelay(RetryMin, RetryMax), strategy WithTimeout(NodeTimeout); a go-redis client also gets MaxRetries -1, DialerRetries 1 (the README's Redlock advice)"
	}
	return Contender{Name: name, Lib: "dlm", Nodes: nodes, Note: note,
		New: func(e Env) (Locker, error) {
			ns, cl, err := perNode(e, node)
			if err != nil {
				return nil, err
			}
			s, err := strat(ns, e)
			if err != nil {
				_ = cl.Close()
				return nil, err
			}
			mopts := []dlm.Option{dlm.WithTTL(e.TTL), dlm.WithRetryDelay(e.RetryMin, e.RetryMax)}
			for _, o := range opts {
				mopts = append(mopts, o(e))
			}
			m, err := dlm.New(s, mopts...)
			if err != nil {
				_ = cl.Close()
				return nil, err
			}
			return &dlmLocker{m: m, cl: cl}, nil
		}}
}

// renewing marks a contender whose locks renew themselves, so it runs the
// renewal scenario.
func renewing(c Contender) Contender {
	c.Renews = true
	return c
}

// dlmRenewing is dlmContender with auto-renewal (autoRenew), joining the
// renewal scenario alone: the same contender without it is measured
// elsewhere.
func dlmRenewing(name string, nodes int, node NodeFactory, strat StrategyFactory) Contender {
	c := renewing(dlmContender(name, nodes, node, strat, autoRenew))
	c.Scenarios = []string{"renewal"}
	c.Note += ", WithAutoRenew(1/3, 1h)"
	return c
}

// The node factories build each client as clients.go does for the peers
// (same pool size and timeouts), plus what our README tells a dlm user to
// set.

// goredisNode is dlm's go-redis driver over a client built like every
// go-redis client of the run (ContextTimeoutEnabled, as the README says).
func goredisNode(addr string, e Env) (driver.Node, func() error, error) {
	c := newGoredis(addr, e)
	return goredis.New(c), c.Close, nil
}

// goredisRedlockNode is goredisNode with the settings the README's Redlock
// section recommends: MaxRetries -1 (one round trip per call) and
// DialerRetries 1 (no redials of a stopped server).
func goredisRedlockNode(addr string, e Env) (driver.Node, func() error, error) {
	c := newGoredisWith(addr, e, func(o *goredislib.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	return goredis.New(c), c.Close, nil
}

// redigoNode is dlm's redigo driver over a pool built like every redigo
// pool of the run, named after its address.
func redigoNode(addr string, e Env) (driver.Node, func() error, error) {
	p := newRedigo(addr, e)
	return redigo.New(p).WithName("redigo(" + addr + ")"), p.Close, nil
}

// rueidisNode is dlm's rueidis driver over a client with rueidis' defaults
// (automatic pipelining), as for every rueidis client of the run.
func rueidisNode(addr string, e Env) (driver.Node, func() error, error) {
	c, err := newRueidis(addr, e)
	if err != nil {
		return nil, nil, err
	}
	return rueidisdrv.New(c), func() error { c.Close(); return nil }, nil
}

// valkeyNode is dlm's valkey-go driver over a client with valkey-go's
// defaults (automatic pipelining), as for every valkey-go client of the run.
func valkeyNode(addr string, e Env) (driver.Node, func() error, error) {
	c, err := newValkey(addr, e)
	if err != nil {
		return nil, nil, err
	}
	return valkeygo.New(c), func() error { c.Close(); return nil }, nil
}

// singleStrategy is strategy.NewSingle over the one node, as the README's
// first lock makes it. WithTimeout, an option the single-instance
// strategy does not need (its default leaves the bound to the caller's
// context and the client), derives a context per call: 5 allocations and
// a timer each (the root's BenchmarkLockUnlockDeadline).
func singleStrategy(nodes []driver.Node, e Env) (driver.Strategy, error) {
	if len(nodes) != 1 {
		return nil, fmt.Errorf("single strategy over %d nodes", len(nodes))
	}
	if e.Bounded {
		return strategy.NewSingle(nodes[0], strategy.WithTimeout(e.NodeTimeout))
	}
	return strategy.NewSingle(nodes[0])
}

// redlockStrategy is strategy.NewRedlock over all nodes, with the per-node
// timeout every Redlock contender gets.
func redlockStrategy(nodes []driver.Node, e Env) (driver.Strategy, error) {
	return strategy.NewRedlock(nodes, strategy.WithTimeout(e.NodeTimeout))
}

// autoRenew is dlm.WithAutoRenew as the README shows it: renew after a
// third of the TTL, for up to an hour.
func autoRenew(Env) dlm.Option { return dlm.WithAutoRenew(1.0/3, time.Hour) }

type dlmLocker struct {
	m  *dlm.Manager
	cl closers
}

func (l *dlmLocker) TryLock(ctx context.Context, key string) (Held, error) {
	lk, err := l.m.TryLock(ctx, key)
	if errors.Is(err, dlm.ErrHeld) {
		err = fmt.Errorf("%w: %w", errBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return dlmHeld{lk}, nil
}

func (l *dlmLocker) Lock(ctx context.Context, key string) (Held, error) {
	lk, err := l.m.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return dlmHeld{lk}, nil
}

func (l *dlmLocker) Close() error { return l.cl.Close() }

type dlmHeld struct{ l *dlm.Lock }

func (h dlmHeld) Unlock(ctx context.Context) error { return h.l.Unlock(ctx) }

func (h dlmHeld) Alive() bool { return h.l.Context().Err() == nil }
