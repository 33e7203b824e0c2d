package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// Every client is built the same way for every contender that uses it, so a
// figure differs only by the lock library on top:
//   - go-redis: ContextTimeoutEnabled (deadlines reach the socket), PoolSize.
//   - redigo: it cannot put a context's deadline on its socket, so its read
//     and write timeouts are the per-node timeout; MaxActive = PoolSize.
//   - rueidis: library defaults (it pipelines; deadlines reach the socket).
//   - valkey-go: the same (a fork of rueidis).

func newGoredis(addr string, e Env) *goredislib.Client { return newGoredisWith(addr, e, nil) }

// newGoredisWith is newGoredis with the options changed by set (when not nil).
func newGoredisWith(addr string, e Env, set func(*goredislib.Options)) *goredislib.Client {
	o := &goredislib.Options{
		Addr:                  addr,
		PoolSize:              e.PoolSize,
		ContextTimeoutEnabled: true,
	}
	if set != nil {
		set(o)
	}
	return goredislib.NewClient(o)
}

func newRedigo(addr string, e Env) *redigo.Pool {
	return &redigo.Pool{
		DialContext: func(ctx context.Context) (redigo.Conn, error) {
			return redigo.DialContext(ctx, "tcp", addr,
				redigo.DialReadTimeout(e.NodeTimeout), redigo.DialWriteTimeout(e.NodeTimeout),
				redigo.DialConnectTimeout(e.NodeTimeout))
		},
		MaxIdle:     e.PoolSize,
		MaxActive:   e.PoolSize,
		IdleTimeout: time.Minute,
		Wait:        true,
	}
}

func newRueidis(addr string, _ Env) (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

func newValkey(addr string, _ Env) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

// perNode makes one client (node, pool) per address of e with newFn, and
// the closers of those made; on an error it closes them and returns it.
func perNode[T any](e Env, newFn func(addr string, e Env) (T, func() error, error)) ([]T, closers, error) {
	var cl closers
	out := make([]T, 0, len(e.Addrs))
	for _, a := range e.Addrs {
		v, c, err := newFn(a, e)
		if err != nil {
			_ = cl.Close()
			return nil, nil, fmt.Errorf("%s: %w", a, err)
		}
		out, cl = append(out, v), append(cl, c)
	}
	return out, cl, nil
}

// closers collects cleanup functions.
type closers []func() error

func (c closers) Close() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i]())
	}
	return errors.Join(errs...)
}
