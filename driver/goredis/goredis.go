// Package goredis adapts a go-redis v9 client (github.com/redis/go-redis/v9)
// to dlm.Node.
//
// Any redis.UniversalClient works: *redis.Client, *redis.ClusterClient, and
// the *redis.Client returned by redis.NewFailoverClient (Sentinel).
//
// A context's deadline bounds every call. go-redis applies it to the socket
// only when the client was built with ContextTimeoutEnabled; otherwise the
// Node waits for the reply in a separate goroutine and returns as soon as the
// context ends, and the abandoned command finishes in the background within
// the client's ReadTimeout. Set ContextTimeoutEnabled for the cheaper path.
// go-redis never watches cancellation, so a context that can be canceled but
// has no deadline always takes the goroutine path.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
)

// Node is a dlm.Node over a go-redis client. It does not close the client.
type Node struct {
	c         redis.UniversalClient
	ctxOnWire bool // the client applies context deadlines to its sockets
	name      string

	hubMu sync.Mutex
	hub   *hub // the pub/sub connection of Watch, created on first use
}

var _ dlm.Node = (*Node)(nil)

// New returns a Node over c, or nil when c is nil (which strategies reject).
func New(c redis.UniversalClient) *Node {
	if c == nil {
		return nil
	}
	n := &Node{c: c, name: fmt.Sprint(c)}
	switch c := c.(type) {
	case *redis.Client:
		n.ctxOnWire = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		n.ctxOnWire = c.Options().ContextTimeoutEnabled
	}
	return n
}

// String names the node by its client.
func (n *Node) String() string { return n.name }

// Client returns the wrapped client.
func (n *Node) Client() redis.UniversalClient { return n.c }

// EvalSHA implements dlm.Node.
func (n *Node) EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	return n.call(ctx, true, sha1, keys, args)
}

// Eval implements dlm.Node.
func (n *Node) Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	return n.call(ctx, false, src, keys, args)
}

func (n *Node) do(ctx context.Context, bySHA bool, script string, keys, args []string) ([]int64, error) {
	if bySHA {
		return ints(n.c.EvalSha(ctx, script, keys, toAny(args)...))
	}
	return ints(n.c.Eval(ctx, script, keys, toAny(args)...))
}

func (n *Node) call(ctx context.Context, bySHA bool, script string, keys, args []string) ([]int64, error) {
	// go-redis puts a context's deadline on the socket, but never watches
	// for cancellation: only a context that cannot end before its deadline
	// takes the direct path.
	if _, ok := ctx.Deadline(); ctx.Done() == nil || n.ctxOnWire && ok {
		return n.do(ctx, bySHA, script, keys, args)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		r   []int64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := n.do(ctx, bySHA, script, keys, args)
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		return res.r, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func toAny(args []string) []any {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	return a
}

// ints converts a script's reply to []int64.
func ints(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return nil, fmt.Errorf("%w: %w", dlm.ErrNoScript, err)
		}
		if errors.Is(err, redis.Nil) {
			return nil, errors.New("dlm: script replied nil, want an array of integers")
		}
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("dlm: script replied %T, want an array of integers", v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		x, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("dlm: script reply element %d is %T, want an integer", i, e)
		}
		out[i] = x
	}
	return out, nil
}
