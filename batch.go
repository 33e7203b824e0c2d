package dlm

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A ScriptCall is one run of a script within a batch.
type ScriptCall struct {
	Keys []string
	Args []string
}

// A ScriptResult is the outcome of one ScriptCall.
type ScriptResult struct {
	Reply []int64
	Err   error
}

// A Pipeliner is a Node that can run many scripts in one round trip (an
// optional ability, found by type assertion). Strategies use it to renew many
// locks at once.
type Pipeliner interface {
	Node
	// EvalSHAMany runs EVALSHA once per call, pipelined, and returns one
	// result per call in order. A call whose script the server lacks has an
	// error wrapping ErrNoScript. A non-nil error means the batch as a whole
	// failed (for example the connection broke or ctx ended); results are
	// then nil.
	EvalSHAMany(ctx context.Context, sha1 string, calls []ScriptCall) ([]ScriptResult, error)
}

// runManyParallel bounds the concurrent calls of RunMany on a Node that is
// not a Pipeliner.
const runManyParallel = 16

// RunMany runs the script once per call on n: pipelined when n is a
// Pipeliner (a few round trips in all), otherwise one call each, 16 at a
// time.
// It returns one result per call in order, or an error when the batch as a
// whole failed.
func (s *Script) RunMany(ctx context.Context, n Node, calls []ScriptCall) ([]ScriptResult, error) {
	p, ok := NodeAs[Pipeliner](n)
	if !ok {
		out := make([]ScriptResult, len(calls))
		var wg sync.WaitGroup
		sem := make(chan struct{}, runManyParallel)
		for i, c := range calls {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				out[i].Reply, out[i].Err = s.Run(ctx, n, c.Keys, c.Args...)
			}()
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return out, nil
	}
	out, err := p.EvalSHAMany(ctx, s.SHA1(), calls)
	if err != nil {
		return nil, err
	}
	// Calls that met NOSCRIPT: load the script with one EVAL, then pipeline
	// the rest again. On a Cluster every master caches scripts on its own, so
	// this may take a round per master.
	for range 16 {
		var retry []int
		for i := range out {
			if out[i].Err != nil && errors.Is(out[i].Err, ErrNoScript) {
				retry = append(retry, i)
			}
		}
		if len(retry) == 0 {
			return out, nil
		}
		first := retry[0]
		out[first].Reply, out[first].Err = n.Eval(ctx, s.src, calls[first].Keys, calls[first].Args...)
		if len(retry) == 1 {
			return out, nil
		}
		again := make([]ScriptCall, len(retry)-1)
		for j, i := range retry[1:] {
			again[j] = calls[i]
		}
		res, err := p.EvalSHAMany(ctx, s.SHA1(), again)
		if err != nil {
			for _, i := range retry[1:] {
				out[i] = ScriptResult{Err: err}
			}
			return out, nil
		}
		for j, i := range retry[1:] {
			out[i] = res[j]
		}
	}
	return out, nil
}

// A HeldKey names a lock a token holds.
type HeldKey struct {
	Key, Token string
}

// An ExtendResult is the outcome of extending one lock of a batch: a new
// lease, or an error as Strategy.Extend would return it.
type ExtendResult struct {
	Lease Lease
	Err   error
}

// A BatchExtender is a Strategy that can extend many locks in a few round
// trips per node (an optional ability, found by type assertion). The Manager
// uses it to auto-renew; without it, locks are renewed one call each.
type BatchExtender interface {
	Strategy
	// ExtendMany extends each lock as Extend would, and returns one result
	// per lock in order. Each lease's validity is counted from before the
	// batch was sent.
	ExtendMany(ctx context.Context, locks []HeldKey, ttl time.Duration) []ExtendResult
}
