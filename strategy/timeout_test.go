package strategy_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/strategy"
)

// ctxNode replies to every call as a granted acquisition (two keys: the
// lock and its fence counter) or a done release (one key) would, and
// records the context of the last Run.
type ctxNode struct{ last context.Context }

func (n *ctxNode) Run(ctx context.Context, calls []driver.Call) {
	n.last = ctx
	for i := range calls {
		calls[i].Reply, calls[i].Err = []int64{1, 1}, nil
		if len(calls[i].Keys) == 1 {
			calls[i].Reply = []int64{1}
		}
	}
}

func (n *ctxNode) RunWait(ctx context.Context, calls []driver.Call, _ driver.Wait) (driver.Acks, error) {
	n.Run(ctx, calls)
	return driver.Acks{}, nil
}

func (n *ctxNode) Watch(context.Context, string, func(string)) (func(), error) {
	return func() {}, nil
}

// WithTimeout bounds a call by the per-node timeout, but a caller's
// deadline that comes first is bound enough: the node then gets the
// caller's context itself, with no derived context (and timer) per call.
func TestTimeoutKeepsAnEarlierDeadline(t *testing.T) {
	node := &ctxNode{}
	s, err := strategy.NewSingle(node, strategy.WithTimeout(time.Minute), strategy.WithCoalescing(false))
	require.NoError(t, err)

	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = s.Acquire(short, "k", "token", time.Second)
	require.NoError(t, err)
	assert.Same(t, short, node.last, "Acquire with a deadline before the per-node timeout")
	require.NoError(t, s.Release(short, "k", "token"))
	assert.Same(t, short, node.last, "Release with a deadline before the per-node timeout")

	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	before := time.Now()
	_, err = s.Acquire(long, "k", "token", time.Second)
	require.NoError(t, err)
	require.NotSame(t, long, node.last, "Acquire with a deadline after the per-node timeout")
	dl, ok := node.last.Deadline()
	require.True(t, ok)
	assert.False(t, dl.After(time.Now().Add(time.Minute)), "the node's deadline %v is past the per-node timeout", dl)
	assert.False(t, dl.Before(before.Add(time.Minute)), "the node's deadline %v is before the per-node timeout", dl)
	assert.Error(t, node.last.Err(), "the per-node context outlived the call")
}
