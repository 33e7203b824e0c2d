package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
)

// Errors a [FaultyNode] returns in place of the wrapped Node's reply.
var (
	// ErrDown is returned by a node that is down; the call never reached it.
	ErrDown = errors.New("conformance: node down")
	// ErrReplyLost is returned by a node that applied the call and lost its reply.
	ErrReplyLost = errors.New("conformance: reply lost after the command was applied")
)

// A Fault describes how a [FaultyNode] misbehaves. The zero Fault is a
// healthy node.
type Fault struct {
	// Down makes every call fail with ErrDown without reaching the node.
	Down bool
	// Delay holds every call this long before it reaches the node, as a slow
	// network would. When the call's context ends first, the call returns the
	// context's error and never reaches the node.
	Delay time.Duration
	// LoseReply lets every call reach the node and run there, then replaces
	// its reply with ErrReplyLost: the command was applied, the caller cannot
	// know it. Error replies (NOSCRIPT among them) come through, so a
	// caller's EVALSHA-then-EVAL fallback still runs the script.
	LoseReply bool
}

func (f Fault) String() string {
	switch {
	case f == Fault{}:
		return "healthy"
	case f.Down:
		return "down"
	case f.Delay > 0 && f.LoseReply:
		return fmt.Sprintf("slow (%v) and losing replies", f.Delay)
	case f.Delay > 0:
		return fmt.Sprintf("slow (%v)", f.Delay)
	default:
		return "losing replies"
	}
}

// A FaultyNode wraps a Node and injects a [Fault] that can be changed at any
// time, also while calls are running. It is safe for concurrent use.
//
// A *FaultyNode itself implements only dlm.Node. Optional abilities of the
// wrapped Node stay reachable through Unwrap (see [dlm.NodeAs]), and calls
// made through them bypass the fault; [FaultyNode.WithAbilities] returns a
// Node that implements them with the fault applied.
type FaultyNode struct {
	node dlm.Node

	mu    sync.Mutex
	fault Fault

	calls   atomic.Int64 // calls made
	reached atomic.Int64 // calls that reached the wrapped node
}

var _ dlm.Node = (*FaultyNode)(nil)

// Wrap returns a healthy FaultyNode over n.
func Wrap(n dlm.Node) *FaultyNode { return &FaultyNode{node: n} }

// Down returns a FaultyNode over n that is down.
func Down(n dlm.Node) *FaultyNode { return wrapWith(n, Fault{Down: true}) }

// Slow returns a FaultyNode over n that holds every call for d before it
// reaches n.
func Slow(n dlm.Node, d time.Duration) *FaultyNode { return wrapWith(n, Fault{Delay: d}) }

// ReplyLost returns a FaultyNode over n that applies every call and loses
// its reply.
func ReplyLost(n dlm.Node) *FaultyNode { return wrapWith(n, Fault{LoseReply: true}) }

func wrapWith(n dlm.Node, f Fault) *FaultyNode {
	w := Wrap(n)
	w.Set(f)
	return w
}

// Set changes the fault. Calls already past the point where a fault applies
// are not affected.
func (f *FaultyNode) Set(fault Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// Heal is Set(Fault{}).
func (f *FaultyNode) Heal() { f.Set(Fault{}) }

// Fault returns the current fault.
func (f *FaultyNode) Fault() Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fault
}

// Calls returns how many calls were made through f, and how many of them
// reached the wrapped node.
func (f *FaultyNode) Calls() (made, reached int64) { return f.calls.Load(), f.reached.Load() }

// Unwrap returns the wrapped Node.
func (f *FaultyNode) Unwrap() dlm.Node { return f.node }

// String names the wrapped node.
func (f *FaultyNode) String() string { return "faulty(" + dlm.NodeName(f.node, 0) + ")" }

// EvalSHA implements dlm.Node.
func (f *FaultyNode) EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	return f.call(ctx, func() ([]int64, error) { return f.node.EvalSHA(ctx, sha1, keys, args...) })
}

// Eval implements dlm.Node.
func (f *FaultyNode) Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	return f.call(ctx, func() ([]int64, error) { return f.node.Eval(ctx, src, keys, args...) })
}

func (f *FaultyNode) call(ctx context.Context, do func() ([]int64, error)) ([]int64, error) {
	fault, err := f.enter(ctx)
	if err != nil {
		return nil, err
	}
	r, err := do()
	if fault.LoseReply && err == nil {
		return nil, ErrReplyLost
	}
	return r, err
}

// enter counts a call and applies the fault's Down and Delay; it returns the
// fault in force when the call was made, or the error that ends the call.
func (f *FaultyNode) enter(ctx context.Context) (Fault, error) {
	f.calls.Add(1)
	fault := f.Fault()
	if fault.Down {
		return fault, ErrDown
	}
	if fault.Delay > 0 {
		t := time.NewTimer(fault.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fault, ctx.Err()
		}
	}
	f.reached.Add(1)
	return fault, nil
}
