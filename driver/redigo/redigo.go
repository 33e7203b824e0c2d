// Package redigo adapts a redigo connection pool (github.com/gomodule/redigo)
// to dlm.Node.
//
// redigo speaks to one server; it has no Sentinel or Cluster client of its
// own. A pool whose DialContext is SentinelDial follows the primary Sentinel
// names, since each call takes a connection from the pool.
//
// Besides dlm.Node, a Node implements dlm.Pipeliner, dlm.Notifier and
// dlm.ReplicaWaiter (what the failover strategy needs).
//
// Every call honours its context: the connection is taken with
// Pool.GetContext and the command runs with redis.DoContext, which sets the
// read deadline from the context's deadline and closes the connection when
// the context ends first, so a call against a server that stopped answering
// returns at its deadline.
package redigo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
)

// Node is a dlm.Node over a *redis.Pool. It does not close the pool.
type Node struct {
	pool *redis.Pool
	name string
	hub  *hub // shared by copies made with WithName
}

var _ dlm.Node = (*Node)(nil)

// New returns a Node over p, or nil when p is nil (which strategies reject).
// It is named "redigo(pool@0x…)"; see WithName.
func New(p *redis.Pool) *Node {
	if p == nil {
		return nil
	}
	return &Node{pool: p, name: fmt.Sprintf("redigo(pool@%p)", p), hub: &hub{pool: p}}
}

// WithName returns a copy of n that String reports as name, for example the
// server's address (a pool does not know it).
func (n *Node) WithName(name string) *Node {
	c := *n
	c.name = name
	return &c
}

// String names the node.
func (n *Node) String() string { return n.name }

// Pool returns the wrapped pool.
func (n *Node) Pool() *redis.Pool { return n.pool }

// EvalSHA implements dlm.Node.
func (n *Node) EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	return n.do(ctx, "EVALSHA", sha1, keys, args)
}

// Eval implements dlm.Node.
func (n *Node) Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	return n.do(ctx, "EVAL", src, keys, args)
}

func (n *Node) do(ctx context.Context, cmd, script string, keys, args []string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := n.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ap := argvPool.Get().(*[]any)
	argv := append((*ap)[:0], boxScript(cmd, script), len(keys))
	for _, k := range keys {
		argv = append(argv, k)
	}
	for _, a := range args {
		argv = append(argv, a)
	}
	var reply any
	if ctx.Done() == nil {
		reply, err = c.Do(cmd, argv...) // nothing can end this context: skip DoContext's goroutine
	} else {
		reply, err = redis.DoContext(c, ctx, cmd, argv...)
		err = withCtxErr(ctx, err)
	}
	if ctx.Err() == nil { // else DoContext may have left a goroutine still writing argv
		clear(argv)
		*ap = argv
		argvPool.Put(ap)
	}
	return ints(reply, err)
}

// withCtxErr wraps err, when ctx has ended or its deadline has passed, with
// the context's error: the read deadline, set from ctx's, may fire before
// ctx's own timer.
func withCtxErr(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) {
		return err // a reply from the server
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

// argvPool recycles argument lists: redigo takes arguments as []any.
var argvPool = sync.Pool{New: func() any { return new([]any) }}

// boxedSHAs holds script digests already converted to interface values, so
// the same few digests are not boxed again on every call.
var boxedSHAs struct {
	sync.RWMutex
	m map[string]any
}

const maxBoxedSHAs = 256

// boxScript returns script as an interface value, without allocating for a
// digest seen before.
func boxScript(cmd, script string) any {
	if cmd != "EVALSHA" {
		return script
	}
	boxedSHAs.RLock()
	v, ok := boxedSHAs.m[script]
	boxedSHAs.RUnlock()
	if ok {
		return v
	}
	v = script
	boxedSHAs.Lock()
	if boxedSHAs.m == nil {
		boxedSHAs.m = make(map[string]any)
	}
	if len(boxedSHAs.m) < maxBoxedSHAs {
		boxedSHAs.m[script] = v
	}
	boxedSHAs.Unlock()
	return v
}

// ints converts a script's reply to []int64.
func ints(reply any, err error) ([]int64, error) {
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT") {
			return nil, fmt.Errorf("%w: %w", dlm.ErrNoScript, err)
		}
		return nil, err
	}
	arr, ok := reply.([]any)
	if !ok {
		if reply == nil {
			return nil, errors.New("dlm: script replied nil, want an array of integers")
		}
		return nil, fmt.Errorf("dlm: script replied %T, want an array of integers", reply)
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
