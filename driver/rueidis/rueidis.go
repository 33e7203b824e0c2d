// Package rueidis adapts a rueidis client (github.com/redis/rueidis) to
// dlm.Node.
//
// Any rueidis.Client works: standalone, Sentinel (ClientOption.Sentinel)
// and Cluster clients, as rueidis.NewClient returns them. Concurrent calls
// share connections through rueidis' automatic pipelining, which makes many
// locks per second cheap.
//
// Every call honours its context's deadline: rueidis puts it on the socket.
// For a context that can be cancelled but has no deadline, the Node waits
// for the reply in a separate goroutine and returns as soon as the context
// ends; the abandoned call ends when the server answers or the client's
// ConnWriteTimeout passes. rueidis alone does not always return on
// cancellation: not with DisableAutoPipelining, and not while it opens a
// connection (its handshake waits for a busy server up to the dial
// timeout). Contexts without Done (context.Background) and with a deadline
// cost no goroutine.
//
// On a Cluster client the keys of one call must share a hash slot (dlm's
// scripts always do); otherwise the call fails with an error.
package rueidis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
)

// Node is a dlm.Node over a rueidis.Client. It does not close the client.
type Node struct {
	c    rueidis.Client
	name string
	hub  *hub
}

var _ dlm.Node = (*Node)(nil)

// New returns a Node over c, or nil when c is nil (which strategies reject).
// It is named after the addresses c knows when New is called.
func New(c rueidis.Client) *Node {
	if c == nil {
		return nil
	}
	addrs := slices.Sorted(maps.Keys(c.Nodes()))
	return &Node{c: c, name: "rueidis(" + strings.Join(addrs, ",") + ")", hub: &hub{}}
}

// WithCancelWatch returns n. Every Node now watches cancellation of
// contexts without a deadline itself (see the package documentation); the
// method remains so that code written for earlier versions, which watched
// only when asked (for clients built with DisableAutoPipelining), compiles.
func (n *Node) WithCancelWatch() *Node { return n }

// String names the node by its client's addresses.
func (n *Node) String() string { return n.name }

// Client returns the wrapped client.
func (n *Node) Client() rueidis.Client { return n.c }

// EvalSHA implements dlm.Node.
func (n *Node) EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	cmd, err := build(func() rueidis.Completed {
		return n.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	})
	if err != nil {
		return nil, err
	}
	return n.do(ctx, cmd)
}

// Eval implements dlm.Node.
func (n *Node) Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	cmd, err := build(func() rueidis.Completed {
		return n.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	})
	if err != nil {
		return nil, err
	}
	return n.do(ctx, cmd)
}

func (n *Node) do(ctx context.Context, cmd rueidis.Completed) ([]int64, error) {
	if !n.watches(ctx) {
		return ints(n.c.Do(ctx, cmd))
	}
	type result struct {
		r   []int64
		err error
	}
	res := watchCancel(ctx, func() result {
		r, err := ints(n.c.Do(ctx, cmd))
		return result{r, err}
	}, func(err error) result { return result{err: err} })
	return res.r, res.err
}

// watches reports whether n must watch ctx's cancellation itself: ctx can
// be cancelled but has no deadline.
func (n *Node) watches(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return !ok && ctx.Done() != nil
}

// watchCancel runs call in its own goroutine and returns its result, or
// failed(ctx.Err()) as soon as ctx ends; an abandoned call finishes in the
// background.
func watchCancel[T any](ctx context.Context, call func() T, failed func(error) T) T {
	if err := ctx.Err(); err != nil {
		return failed(err)
	}
	ch := make(chan T, 1)
	go func() { ch <- call() }()
	select {
	case res := <-ch:
		return res
	case <-ctx.Done():
		return failed(ctx.Err())
	}
}

// build turns the command builder's panic on keys in different Cluster hash
// slots into an error.
func build(f func() rueidis.Completed) (cmd rueidis.Completed, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: rueidis: %v", dlm.ErrInvalid, p)
		}
	}()
	return f(), nil
}

// ints converts a script's reply to []int64.
func ints(res rueidis.RedisResult) ([]int64, error) {
	if err := res.Error(); err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
			return nil, fmt.Errorf("%w: %w", dlm.ErrNoScript, err)
		}
		if rueidis.IsRedisNil(err) {
			return nil, fmt.Errorf("dlm: script replied nil, want an array of integers")
		}
		return nil, err
	}
	arr, err := res.ToArray()
	if err != nil {
		return nil, fmt.Errorf("dlm: script reply is not an array of integers: %w", err)
	}
	out := make([]int64, len(arr))
	for i := range arr {
		x, err := arr[i].ToInt64()
		if err != nil {
			return nil, fmt.Errorf("dlm: script reply element %d: %w", i, err)
		}
		out[i] = x
	}
	return out, nil
}
