package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
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
	// Down makes every call (every call of a batch, and Watch) fail with
	// ErrDown without reaching the node.
	Down bool
	// Delay holds every call (a whole batch, a Watch) this long before it
	// reaches the node, as a slow network would. When the call's context
	// ends first, the call fails with the context's error and never reaches
	// the node.
	Delay time.Duration
	// LoseReply lets every call reach the node and run there, then replaces
	// its reply with ErrReplyLost: the command was applied, the caller cannot
	// know it. Error replies (NOSCRIPT among them) come through, so a
	// caller's EVALSHA-then-EVAL fallback still runs the script. RunWait
	// loses the wait's reply too.
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

// A FaultyNode wraps a Node and injects a [Fault] into every call of Run,
// RunWait and Watch; the fault can be changed at any time, also while calls
// are running. It is safe for concurrent use.
//
// A Watch delivers messages only while the node is neither down nor losing
// replies (a delay does not hold messages).
type FaultyNode struct {
	node driver.Node

	mu    sync.Mutex
	fault Fault

	calls   atomic.Int64 // calls made
	reached atomic.Int64 // calls that reached the wrapped node
}

var _ driver.Node = (*FaultyNode)(nil)

// Wrap returns a healthy FaultyNode over n.
func Wrap(n driver.Node) *FaultyNode { return &FaultyNode{node: n} }

// Down returns a FaultyNode over n that is down.
func Down(n driver.Node) *FaultyNode { return wrapWith(n, Fault{Down: true}) }

// Slow returns a FaultyNode over n that holds every call for d before it
// reaches n.
func Slow(n driver.Node, d time.Duration) *FaultyNode { return wrapWith(n, Fault{Delay: d}) }

// ReplyLost returns a FaultyNode over n that applies every call and loses
// its reply.
func ReplyLost(n driver.Node) *FaultyNode { return wrapWith(n, Fault{LoseReply: true}) }

func wrapWith(n driver.Node, f Fault) *FaultyNode {
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

// Calls returns how many calls of Run, RunWait and Watch were made through
// f (a batch counts once), and how many of them reached the wrapped node.
func (f *FaultyNode) Calls() (made, reached int64) { return f.calls.Load(), f.reached.Load() }

// String names the wrapped node.
func (f *FaultyNode) String() string { return "faulty(" + nodekit.Name(f.node, 0) + ")" }

// Run implements driver.Node. A call that never reached the node fails with
// ErrDown or its context's error; with LoseReply, every reply is replaced by
// ErrReplyLost while error replies come through.
func (f *FaultyNode) Run(ctx context.Context, calls []driver.Call) {
	fault, err := f.enter(ctx)
	if err != nil {
		failAll(calls, err)
		return
	}
	f.node.Run(ctx, calls)
	if fault.LoseReply {
		loseReplies(calls)
	}
}

// RunWait implements driver.Node, applying the fault as Run does. With
// LoseReply the wait's reply is lost too: the error is that of the first
// call, or ErrReplyLost when there are no calls, and the Acks are zero
// (errors matching errors.ErrUnsupported or dlm.ErrInvalid come through).
func (f *FaultyNode) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	fault, err := f.enter(ctx)
	if err != nil {
		failAll(calls, err)
		return driver.Acks{}, err
	}
	acks, err := f.node.RunWait(ctx, calls, w)
	if !fault.LoseReply || errors.Is(err, errors.ErrUnsupported) || errors.Is(err, dlm.ErrInvalid) {
		return acks, err
	}
	loseReplies(calls)
	if len(calls) == 0 {
		return driver.Acks{}, ErrReplyLost
	}
	return driver.Acks{}, calls[0].Err
}

// Watch implements driver.Node. Down fails it with ErrDown and Delay holds it
// before it reaches the node.
func (f *FaultyNode) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if _, err := f.enter(ctx); err != nil {
		return nil, err
	}
	return f.node.Watch(ctx, channel, func(payload string) {
		if fault := f.Fault(); !fault.Down && !fault.LoseReply {
			notify(payload)
		}
	})
}

func failAll(calls []driver.Call, err error) {
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, err
	}
}

// loseReplies replaces every reply with ErrReplyLost; errors stay.
func loseReplies(calls []driver.Call) {
	for i := range calls {
		if calls[i].Err == nil {
			calls[i].Reply, calls[i].Err = nil, ErrReplyLost
		}
	}
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
