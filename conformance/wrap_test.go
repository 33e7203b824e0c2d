package conformance_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// counted is a user's wrapper: it embeds a Node and overrides Run only, to
// count batches.
type counted struct {
	driver.Node
	runs atomic.Int64
}

func (c *counted) Run(ctx context.Context, calls []driver.Call) {
	c.runs.Add(1)
	c.Node.Run(ctx, calls)
}

// abilities counts the RunWait and Watch calls that reach a go-redis Node.
type abilities struct {
	driver.Node
	waits, watches atomic.Int64
}

func (a *abilities) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	a.waits.Add(1)
	return a.Node.RunWait(ctx, calls, w)
}

func (a *abilities) Watch(ctx context.Context, channel string, notify func(string)) (func(), error) {
	a.watches.Add(1)
	return a.Node.Watch(ctx, channel, notify)
}

// Wrapping keeps abilities: a wrapper that embeds a go-redis Node and
// overrides only Run passes the RunWait and Watch rules, its RunWait and
// Watch reaching the Node beneath.
func TestWrapperKeepsAbilities(t *testing.T) {
	t.Parallel() // its server is its own
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	inner := &abilities{Node: goredis.New(client)}
	node := &counted{Node: inner}
	var ran sync.Map
	conformance.RunNode(t, func(t *testing.T) driver.Node {
		if name, rule, ok := strings.Cut(t.Name(), "/"); ok && name != "" {
			if !strings.HasPrefix(rule, "RunWait") && !strings.HasPrefix(rule, "Watch") {
				t.Skip("this test checks the rules of RunWait and Watch")
			}
			ran.Store(rule, true)
		}
		return node
	})
	for _, rule := range []string{"RunWaitReplies", "RunWaitNoScript", "RunWaitDeadline", "WatchDelivers"} {
		if _, ok := ran.Load(rule); !ok {
			t.Errorf("rule %s did not run", rule)
		}
	}
	if inner.waits.Load() == 0 || inner.watches.Load() == 0 {
		t.Errorf("RunWait reached the Node beneath the wrapper %d times and Watch %d times; want both", inner.waits.Load(), inner.watches.Load())
	}
	if node.runs.Load() == 0 {
		t.Error("the rules never called the wrapper's Run")
	}
}
