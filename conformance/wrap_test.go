package conformance_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// counted is a user's wrapper: it embeds a Node and overrides Run only, to
// count batches.
type counted struct {
	dlm.Node
	runs atomic.Int64
}

func (c *counted) Run(ctx context.Context, calls []dlm.Call) {
	c.runs.Add(1)
	c.Node.Run(ctx, calls)
}

// Wrapping keeps abilities: a wrapper that embeds a go-redis Node and
// overrides only Run passes the RunWait and Watch rules, not skipping them.
func TestWrapperKeepsAbilities(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	node := &counted{Node: goredis.New(client)}
	want := []string{"RunWaitReplies", "RunWaitNoScript", "RunWaitDeadline", "WatchDelivers"}
	var (
		mu      sync.Mutex
		verdict = map[string]string{}
	)
	conformance.RunNode(t, func(t *testing.T) dlm.Node {
		rule := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
		if !strings.HasPrefix(rule, "RunWait") && !strings.HasPrefix(rule, "Watch") {
			t.Skip("this test checks the rules of RunWait and Watch")
		}
		t.Cleanup(func() {
			v := "passed"
			if t.Skipped() {
				v = "skipped"
			} else if t.Failed() {
				v = "failed"
			}
			mu.Lock()
			verdict[rule] = v
			mu.Unlock()
		})
		return node
	})
	for _, rule := range want {
		if verdict[rule] != "passed" {
			t.Errorf("rule %s over a wrapper embedding a go-redis Node: %s, want passed", rule, verdict[rule])
		}
	}
	if len(verdict) != len(want) {
		t.Errorf("rules checked: %v, want %v", verdict, want)
	}
	if node.runs.Load() == 0 {
		t.Error("the rules never called the wrapper's Run")
	}
}
