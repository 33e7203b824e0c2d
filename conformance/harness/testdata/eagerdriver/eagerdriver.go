// Package eagerdriver is a dlm driver as a third party would write one,
// over go-redis, whose constructor dials a pool of connections at once (as
// radix's pool does) before any call needs one: the conformance suite must
// pass it in both layouts its documentation gives (harness.Run, and
// harness.Own before conformance.RunNode on the author's own server),
// connections opened just before a rule's fault included.
package eagerdriver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/nodekit"
)

// Driver is a driver.Node over a go-redis client whose first connections
// were dialled by New.
type Driver struct {
	driver.Node
	client *redis.Client
}

var _ driver.Node = (*Driver)(nil)

// New dials n connections to addr at once and returns a Driver whose
// client uses them first, then dials more as it needs them (each dial
// bounded by its context). Close closes it.
func New(addr string, n int) (*Driver, error) { return NewTLS(addr, n, nil) }

// NewTLS is New over TLS with cfg (plain when cfg is nil): its dials are
// nodekit.Dial's, which verify the server's certificate and report a
// failure of TLS as a permanent error.
func NewTLS(addr string, n int, cfg *tls.Config) (*Driver, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	pool := make(chan net.Conn, n)
	for range n {
		c, err := nodekit.Dial(context.Background(), d, cfg, "tcp", addr)
		if err != nil {
			close(pool)
			for c := range pool {
				_ = c.Close()
			}
			return nil, fmt.Errorf("eagerdriver: dialling %s: %w", addr, err)
		}
		pool <- c
	}
	client := redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              2 * n,
		MinIdleConns:          n,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // a driver.Node never retries
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case c := <-pool:
				return c, nil
			default:
				return nodekit.Dial(ctx, d, cfg, network, addr)
			}
		},
	})
	return &Driver{Node: goredis.New(client), client: client}, nil
}

// Close closes the client.
func (d *Driver) Close() error { return d.client.Close() }

func (d *Driver) String() string { return "eagerdriver(" + d.client.Options().Addr + ")" }
