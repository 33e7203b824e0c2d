// Package goredis adapts a go-redis v9 client (github.com/redis/go-redis/v9)
// to driver.Node.
//
// Any redis.UniversalClient works: *redis.Client, *redis.ClusterClient, and
// the *redis.Client returned by redis.NewFailoverClient (Sentinel). RunWait
// needs one connection to the server the calls' keys live on: it works on a
// *redis.Client, a failover client and a *redis.ClusterClient (on the master
// of the first call's first key); other kinds, such as *redis.Ring, report
// an error matching errors.ErrUnsupported.
//
// A context's deadline bounds every call. go-redis applies it to the socket
// only when the client was built with ContextTimeoutEnabled, and it never
// watches cancellation. So a call goes straight to the client when its
// context cannot end, or has a deadline and the client has
// ContextTimeoutEnabled; otherwise it runs in a separate goroutine (one of
// the node's, kept between calls) and returns as soon as the context ends,
// and the abandoned commands finish in the background within the client's
// ReadTimeout (they still read the calls' Keys and Args meanwhile); such a
// batch goes as pipelines of 128 calls one after the other, so that those
// answered before the context ended keep their replies. Set ContextTimeoutEnabled for the cheaper path.
// go-redis reads a pipeline's replies within ReadTimeout (default 3s) when
// the context has no deadline on the socket, so a Wait's Timeout must stay
// below it.
package goredis

// The node and its driver.Node methods. Their work is in files by job:
// bounded.go (calls within their context), pipeline.go (commands and
// pipelines), replies.go, routing.go (one server or a Cluster's masters),
// watch.go and shardwatch.go (Watch's connections), dial.go and tls.go
// (Dial).

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/runner"
	"github.com/dlmgo/dlm/nodekit"
)

// node is a driver.Node over a go-redis client. It does not close the client.
type node struct {
	c         redis.UniversalClient
	ctxOnWire bool // the client applies context deadlines to its sockets
	name      string
	master    string                // the master name of Dial's failover client
	hub       *nodekit.Hub          // Watch's pub/sub connection
	flights   *runner.Pool[*flight] // run the calls awaited in a goroutine (see bounded)

	mu    sync.Mutex
	slots map[int]*nodekit.Hub // on a Cluster: Watch's shard connection per hash slot
}

var _ driver.Node = (*node)(nil)

// New returns a driver.Node over c, or nil when c is nil (which strategies
// reject). The node does not close c. It names itself (fmt.Stringer) by
// c's address: "host:port" for a *redis.Client, "cluster(host:port,...)"
// for a *redis.ClusterClient, "primary of NAME" for Dial's client of a
// primary behind Sentinel (New can only say "FailoverClient").
func New(c redis.UniversalClient) driver.Node {
	if c == nil {
		return nil
	}
	return newNode(c)
}

// newNode is New for a client that is not nil.
func newNode(c redis.UniversalClient) *node {
	n := &node{c: c, name: fmt.Sprintf("%T", c)}
	switch c := c.(type) {
	case *redis.Client:
		// A failover client's Addr is "FailoverClient"; go-redis does not
		// expose its master name.
		n.ctxOnWire, n.name = c.Options().ContextTimeoutEnabled, c.Options().Addr
	case *redis.ClusterClient:
		n.ctxOnWire = c.Options().ContextTimeoutEnabled
		n.name = "cluster(" + strings.Join(c.Options().Addrs, ",") + ")"
	}
	n.hub = nodekit.NewHub(n.openPubSub)
	n.flights = runner.New((*flight).run)
	return n
}

// String names the node (see New).
func (n *node) String() string { return n.name }

// Run implements driver.Node: one call is one EVALSHA or EVAL, several are one
// go-redis pipeline (on a Cluster, one per master).
func (n *node) Run(ctx context.Context, calls []driver.Call) {
	if cc, ok := n.c.(*redis.ClusterClient); ok && len(calls) > 1 && n.byMaster(ctx, cc, calls) {
		return
	}
	if len(calls) > 0 {
		_, _ = n.bounded(ctx, calls, nil)
	}
}

// RunWait implements driver.Node: the calls and the wait are one pipeline on
// one connection (see the package documentation for the client kinds).
func (n *node) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	return n.bounded(ctx, calls, &w)
}

// Watch implements driver.Node. All channels of a node share one dedicated
// pub/sub connection (see nodekit.Hub). go-redis re-establishes a broken
// connection and its subscriptions; messages published in between are lost.
func (n *node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if cc, ok := n.c.(*redis.ClusterClient); ok {
		return n.slotHub(cc, channel).Watch(ctx, channel, notify)
	}
	return n.hub.Watch(ctx, channel, notify)
}
