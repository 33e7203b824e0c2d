package conformance

import (
	"context"

	"github.com/dlmgo/dlm"
)

// WithAbilities returns f as a dlm.Node that also implements each of
// dlm.ReplicaWaiter, dlm.Pipeliner and dlm.Notifier that the wrapped Node
// implements (directly, not through Unwrap), and no other, with f's fault
// applied to calls made through them:
//
//   - Down fails the call (Watch included) with ErrDown.
//   - Delay holds the call (Watch included) before it reaches the node.
//   - LoseReply: EvalSHAWait and EvalWait return ErrReplyLost in place of
//     any script reply; EvalSHAMany replaces each successful result with
//     ErrReplyLost (error results, NOSCRIPT among them, come through).
//
// A Watch delivers messages only while f is neither down nor losing replies
// (a delay does not hold messages). Calls through the returned Node count in
// f.Calls, and Set changes its fault. Its Unwrap returns the wrapped Node.
func (f *FaultyNode) WithAbilities() dlm.Node {
	_, rw := f.node.(dlm.ReplicaWaiter)
	_, pl := f.node.(dlm.Pipeliner)
	_, nt := f.node.(dlm.Notifier)
	r, p, n := faultyWaiter{f}, faultyPipeliner{f}, faultyNotifier{f}
	switch {
	case rw && pl && nt:
		return struct {
			*FaultyNode
			faultyWaiter
			faultyPipeliner
			faultyNotifier
		}{f, r, p, n}
	case rw && pl:
		return struct {
			*FaultyNode
			faultyWaiter
			faultyPipeliner
		}{f, r, p}
	case rw && nt:
		return struct {
			*FaultyNode
			faultyWaiter
			faultyNotifier
		}{f, r, n}
	case pl && nt:
		return struct {
			*FaultyNode
			faultyPipeliner
			faultyNotifier
		}{f, p, n}
	case rw:
		return struct {
			*FaultyNode
			faultyWaiter
		}{f, r}
	case pl:
		return struct {
			*FaultyNode
			faultyPipeliner
		}{f, p}
	case nt:
		return struct {
			*FaultyNode
			faultyNotifier
		}{f, n}
	}
	return f
}

type faultyWaiter struct{ f *FaultyNode }

func (w faultyWaiter) EvalSHAWait(ctx context.Context, wt dlm.Wait, sha1 string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return w.call(ctx, func() ([]int64, dlm.Acks, error) {
		return w.f.node.(dlm.ReplicaWaiter).EvalSHAWait(ctx, wt, sha1, keys, args...)
	})
}

func (w faultyWaiter) EvalWait(ctx context.Context, wt dlm.Wait, src string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return w.call(ctx, func() ([]int64, dlm.Acks, error) {
		return w.f.node.(dlm.ReplicaWaiter).EvalWait(ctx, wt, src, keys, args...)
	})
}

func (w faultyWaiter) call(ctx context.Context, do func() ([]int64, dlm.Acks, error)) ([]int64, dlm.Acks, error) {
	fault, err := w.f.enter(ctx)
	if err != nil {
		return nil, dlm.Acks{}, err
	}
	r, acks, err := do()
	if fault.LoseReply && (err == nil || r != nil) {
		return nil, dlm.Acks{}, ErrReplyLost
	}
	return r, acks, err
}

type faultyPipeliner struct{ f *FaultyNode }

func (p faultyPipeliner) EvalSHAMany(ctx context.Context, sha1 string, calls []dlm.ScriptCall) ([]dlm.ScriptResult, error) {
	fault, err := p.f.enter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := p.f.node.(dlm.Pipeliner).EvalSHAMany(ctx, sha1, calls)
	if fault.LoseReply {
		for i := range res {
			if res[i].Err == nil {
				res[i] = dlm.ScriptResult{Err: ErrReplyLost}
			}
		}
	}
	return res, err
}

type faultyNotifier struct{ f *FaultyNode }

func (n faultyNotifier) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if _, err := n.f.enter(ctx); err != nil {
		return nil, err
	}
	return n.f.node.(dlm.Notifier).Watch(ctx, channel, func(payload string) {
		if fault := n.f.Fault(); !fault.Down && !fault.LoseReply {
			notify(payload)
		}
	})
}
