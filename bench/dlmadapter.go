package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

// A NodeFactory makes one dlm.Node over a new client to addr, and the
// function that closes the client.
type NodeFactory func(addr string, e Env) (dlm.Node, func() error, error)

// A StrategyFactory builds a dlm strategy over the nodes of a topology.
type StrategyFactory func(nodes []dlm.Node, e Env) (dlm.Strategy, error)

// dlmContender is dlm's Manager over strategy strat on nodes made by node.
// opts adds Manager options (auto-renewal, server-woken waiting) beyond the
// shared TTL and retry budget, which every dlm contender gets.
func dlmContender(name string, nodes int, node NodeFactory, strat StrategyFactory, opts ...func(Env) dlm.Option) Contender {
	return Contender{Name: name, Lib: "dlm", Nodes: nodes,
		Note: "WithTTL(TTL), WithRetryDelay(RetryMin, RetryMax), strategy WithTimeout(NodeTimeout)",
		New: func(e Env) (Locker, error) {
			var cl closers
			ns := make([]dlm.Node, len(e.Addrs))
			for i, a := range e.Addrs {
				n, c, err := node(a, e)
				if err != nil {
					_ = cl.Close()
					return nil, err
				}
				ns[i], cl = n, append(cl, c)
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

// goredisNode is dlm's go-redis driver over a client built like every
// go-redis client of the run.
func goredisNode(addr string, e Env) (dlm.Node, func() error, error) {
	c := newGoredis(addr, e)
	return goredis.New(c), c.Close, nil
}

// singleStrategy is strategy.NewSingle over the first node.
func singleStrategy(nodes []dlm.Node, e Env) (dlm.Strategy, error) {
	if len(nodes) != 1 {
		return nil, fmt.Errorf("single strategy over %d nodes", len(nodes))
	}
	return strategy.NewSingle(nodes[0], strategy.WithTimeout(e.NodeTimeout))
}

type dlmLocker struct {
	m  *dlm.Manager
	cl closers
}

func (l *dlmLocker) TryLock(ctx context.Context, key string) (Held, error) {
	lk, err := l.m.TryLock(ctx, key)
	var held *dlm.HeldError
	if errors.As(err, &held) {
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
