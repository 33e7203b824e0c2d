package main

import (
	"context"
	"errors"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Every client is built the same way for every contender that uses it, so a
// figure differs only by the lock library on top:
//   - go-redis: ContextTimeoutEnabled (deadlines reach the socket), PoolSize.
//   - redigo: it cannot put a context's deadline on its socket, so its read
//     and write timeouts are the per-node timeout; MaxActive = PoolSize.
//   - rueidis: library defaults (it pipelines; deadlines reach the socket).

func newGoredis(addr string, e Env) *goredislib.Client {
	return goredislib.NewClient(&goredislib.Options{
		Addr:                  addr,
		PoolSize:              e.PoolSize,
		ContextTimeoutEnabled: true,
	})
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

// closers collects cleanup functions.
type closers []func() error

func (c closers) Close() error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i]())
	}
	return errors.Join(errs...)
}
