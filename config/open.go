package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/errs"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// An Endpoint is what a Dialer connects to (see nodekit.Endpoint: it lives
// there so that drivers need not import config).
type Endpoint = nodekit.Endpoint

// A Dialer returns a node over ep, with a Closer that closes the node's
// client. It may connect at once or on first use; a server that cannot be
// reached yet should not be an error, so that Redlock starts with a
// minority of its masters down. The driver packages each have one:
// goredis.Dial, redigo.Dial, rueidis.Dial and valkeygo.Dial (redigo has no
// Cluster client).
type Dialer func(ctx context.Context, ep Endpoint) (driver.Node, io.Closer, error)

// Open parses url (see Config) and returns a Manager over the deployment it
// names, with nodes made by dial, and a Closer that closes them. The
// Manager has the options the URL sets, then opts (which win). Errors about
// the URL match dlm.ErrInvalid and never quote a password.
//
//	m, closer, err := config.Open(ctx, "redlock://h1:6379,h2:6379,h3:6379?ttl=10s", goredis.Dial)
func Open(ctx context.Context, url string, dial Dialer, opts ...dlm.Option) (*dlm.Manager, io.Closer, error) {
	c, err := ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	return c.Open(ctx, dial, opts...)
}

// Open is Open for c: it opens the strategy with OpenStrategy and builds
// the Manager with ManagerOptions, then opts.
func (c Config) Open(ctx context.Context, dial Dialer, opts ...dlm.Option) (*dlm.Manager, io.Closer, error) {
	s, cl, err := c.OpenStrategy(ctx, dial)
	if err != nil {
		return nil, nil, err
	}
	m, err := dlm.New(s, append(c.ManagerOptions(), opts...)...)
	if err != nil {
		_ = cl.Close()
		return nil, nil, err
	}
	return m, cl, nil
}

// OpenStrategy dials each endpoint of c once (each Redlock master, the one
// server, the primary through the Sentinels, or the Cluster through its
// listed nodes) and builds the strategy with NewStrategy. The Closer
// closes the nodes' clients. Operator tools (package inspect) work on the
// strategy.
func (c Config) OpenStrategy(ctx context.Context, dial Dialer) (driver.Strategy, io.Closer, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	if len(c.Addrs) == 0 {
		return nil, nil, badField("addrs", "no address")
	}
	eps, err := c.endpoints()
	if err != nil {
		return nil, nil, err
	}
	var nodes []driver.Node
	var cl closers
	for _, ep := range eps {
		n, closer, err := dial(ctx, ep)
		if err != nil {
			_ = cl.Close()
			return nil, nil, errs.Within(fmt.Sprintf("config: dial %v", ep), err)
		}
		nodes, cl = append(nodes, n), append(cl, closer)
	}
	s, err := c.NewStrategy(nodes...)
	if err != nil {
		_ = cl.Close()
		return nil, nil, err
	}
	return s, cl, nil
}

// endpoints lists what to dial: one endpoint per address, the primary
// through the Sentinels, or the Cluster.
// It reads the TLS files.
func (c Config) endpoints() ([]Endpoint, error) {
	ep := Endpoint{Username: c.Username, Password: c.Password, DB: c.DB}
	var err error
	if ep.TLS, err = c.TLSConfig(); err != nil {
		return nil, err
	}
	if c.Cluster {
		ep.Cluster = slices.Clone(c.Addrs)
		return []Endpoint{ep}, nil
	}
	if c.Master != "" {
		ep.Master, ep.Sentinels = c.Master, slices.Clone(c.Addrs)
		ep.SentinelUsername, ep.SentinelPassword = c.SentinelUsername, c.SentinelPassword
		if ep.SentinelTLS, err = c.SentinelTLSConfig(); err != nil {
			return nil, err
		}
		return []Endpoint{ep}, nil
	}
	eps := make([]Endpoint, len(c.Addrs))
	for i, a := range c.Addrs {
		ep.Addr = a
		eps[i] = ep
	}
	return eps, nil
}

// closers closes each of its Closers.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
