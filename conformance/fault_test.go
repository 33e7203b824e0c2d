package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

const incr = "return {redis.call('INCR', KEYS[1])}"

// faultFixture is a real server, a go-redis Node over it and a reader of
// its counters.
type faultFixture struct {
	c     *redis.Client
	inner driver.Node
	count func(key string) int64
}

func newFaultFixture(t *testing.T) faultFixture {
	c := redistest.Start(t).Client(t)
	return faultFixture{c: c, inner: goredis.New(c), count: func(key string) int64 {
		t.Helper()
		n, err := c.Get(context.Background(), key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n
	}}
}

// run1 runs one call on n and returns its outcome.
func run1(ctx context.Context, n driver.Node, call driver.Call) ([]int64, error) {
	calls := []driver.Call{call}
	n.Run(ctx, calls)
	return calls[0].Reply, calls[0].Err
}

func TestFaultyNode(t *testing.T) {
	t.Parallel() // its server is its own
	fx := newFaultFixture(t)
	ctx := context.Background()
	evalOn := func(n driver.Node, key string) ([]int64, error) {
		return run1(ctx, n, driver.Call{Source: incr, Keys: []string{key}})
	}

	t.Run("Down", func(t *testing.T) {
		f := conformance.Down(fx.inner)
		if _, err := evalOn(f, "down"); !errors.Is(err, conformance.ErrDown) {
			t.Fatalf("Run on a down node: %v, want ErrDown", err)
		}
		calls := []driver.Call{{Source: incr, Keys: []string{"down"}}, {Source: incr, Keys: []string{"down"}}}
		f.Run(ctx, calls)
		for i, c := range calls {
			if !errors.Is(c.Err, conformance.ErrDown) || c.Reply != nil {
				t.Fatalf("call %d of a batch on a down node: %v, %v; want ErrDown", i+1, c.Reply, c.Err)
			}
		}
		if n := fx.count("down"); n != 0 {
			t.Fatalf("a down node ran the script (counter %d)", n)
		}
		if made, reached := f.Calls(); made != 2 || reached != 0 {
			t.Fatalf("Calls() = %d, %d; want 2, 0", made, reached)
		}
		f.Heal()
		if r, err := evalOn(f, "down"); err != nil || len(r) != 1 || r[0] != 1 {
			t.Fatalf("healed node: %v, %v", r, err)
		}
	})

	t.Run("ReplyLost", func(t *testing.T) {
		f := conformance.ReplyLost(fx.inner)
		if _, err := evalOn(f, "lost"); !errors.Is(err, conformance.ErrReplyLost) {
			t.Fatalf("Run on a node losing replies: %v, want ErrReplyLost", err)
		}
		if n := fx.count("lost"); n != 1 {
			t.Fatalf("the script should have run once, counter %d", n)
		}
		sc := eval.NewScript("-- fault test\n" + incr)
		if _, err := run1(ctx, f, driver.Call{SHA1: sc.SHA1(), Keys: []string{"lost"}}); !errors.Is(err, driver.ErrNoScript) {
			t.Fatalf("EVALSHA of an unknown script: %v, want the NOSCRIPT error to come through", err)
		}
		if _, err := sc.Run(ctx, f, []string{"lost"}); !errors.Is(err, conformance.ErrReplyLost) {
			t.Fatalf("Script.Run: %v, want ErrReplyLost after the EVAL fallback ran", err)
		}
		if n := fx.count("lost"); n != 2 {
			t.Fatalf("Script.Run's EVAL should have run, counter %d", n)
		}
		// In a batch, NOSCRIPT comes through next to lost replies.
		calls := []driver.Call{{Source: incr, Keys: []string{"lost"}}, {SHA1: eval.NewScript("return {0} -- unknown").SHA1()}}
		f.Run(ctx, calls)
		if !errors.Is(calls[0].Err, conformance.ErrReplyLost) || !errors.Is(calls[1].Err, driver.ErrNoScript) {
			t.Fatalf("batch losing replies: errors %v and %v, want ErrReplyLost and NOSCRIPT", calls[0].Err, calls[1].Err)
		}
		if n := fx.count("lost"); n != 3 {
			t.Fatalf("the batch's call should have run, counter %d", n)
		}
	})

	// Slow's delay is the subject: it runs in virtual time (synctest) over
	// a node in memory, so a loaded machine stretches nothing it checks.
	t.Run("Slow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			inner := &memNode{}
			f := conformance.Slow(inner, 300*time.Millisecond)
			cx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, err := run1(cx, f, driver.Call{Source: incr, Keys: []string{"slow"}}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("slow node, short deadline: %v, want DeadlineExceeded", err)
			}
			if took := time.Since(start); took != 50*time.Millisecond {
				t.Fatalf("slow node, 50ms deadline: returned after %v, want at its deadline", took)
			}
			if n := inner.runs.Load(); n != 0 {
				t.Fatalf("a call whose context ended during the delay reached the node (%d calls)", n)
			}
			start = time.Now()
			if r, err := run1(t.Context(), f, driver.Call{Source: incr, Keys: []string{"slow"}}); err != nil || !slices.Equal(r, []int64{1}) {
				t.Fatalf("slow node: %v, %v; want [1]", r, err)
			}
			if took := time.Since(start); took != 300*time.Millisecond {
				t.Fatalf("slow node answered after %v, want after its 300ms delay", took)
			}
			if n := inner.runs.Load(); n != 1 {
				t.Fatalf("the node ran %d calls, want 1", n)
			}
		})
	})

	t.Run("String", func(t *testing.T) {
		f := conformance.Wrap(conformance.Wrap(fx.inner))
		if s := fmt.Sprint(f); s != "faulty(faulty("+fmt.Sprint(fx.inner)+"))" {
			t.Fatalf("String() = %q", s)
		}
		if s := f.Fault().String(); s != "healthy" {
			t.Fatalf("Fault().String() = %q, want healthy", s)
		}
	})
}

// The fault applies to RunWait and Watch as to Run.
func TestFaultyNodeWaitWatch(t *testing.T) {
	t.Parallel() // its server is its own
	fx := newFaultFixture(t)
	ctx := context.Background()
	f := conformance.Wrap(fx.inner)
	w := driver.Wait{Timeout: time.Second}
	wait := func(call driver.Call) ([]int64, error) {
		calls := []driver.Call{call}
		acks, err := f.RunWait(ctx, calls, w)
		if err != nil && acks != (driver.Acks{}) {
			t.Errorf("RunWait failed with %v and acks %+v, want zero Acks", err, acks)
		}
		return calls[0].Reply, err
	}

	f.Set(conformance.Fault{Down: true})
	if _, err := wait(driver.Call{Source: incr, Keys: []string{"wa"}}); !errors.Is(err, conformance.ErrDown) {
		t.Errorf("RunWait on a down node: %v, want ErrDown", err)
	}
	if _, err := f.Watch(ctx, "ch", func(string) {}); !errors.Is(err, conformance.ErrDown) {
		t.Errorf("Watch on a down node: %v, want ErrDown", err)
	}
	if v := fx.count("wa"); v != 0 {
		t.Fatalf("a down node ran the script (counter %d)", v)
	}

	f.Set(conformance.Fault{LoseReply: true})
	if r, err := wait(driver.Call{Source: incr, Keys: []string{"wa"}}); !errors.Is(err, conformance.ErrReplyLost) || r != nil {
		t.Errorf("RunWait losing its reply: %v %v, want ErrReplyLost", r, err)
	}
	if _, err := wait(driver.Call{SHA1: eval.NewScript("return {1} -- unknown").SHA1()}); !errors.Is(err, driver.ErrNoScript) {
		t.Errorf("RunWait of an unknown script losing replies: %v, want NOSCRIPT to come through", err)
	}
	if _, err := f.RunWait(ctx, nil, driver.Wait{}); !errors.Is(err, dlm.ErrInvalid) {
		t.Errorf("RunWait with a zero Wait losing replies: %v, want dlm.ErrInvalid to come through", err)
	}
	if v := fx.count("wa"); v != 1 {
		t.Fatalf("counter %d after one applied call with a lost reply, want 1", v)
	}
	if made, reached := f.Calls(); made != 5 || reached != 3 {
		t.Errorf("Calls() = %d, %d; want 5 made, 3 reached", made, reached)
	}

	// The fault applies when a message is delivered: the node beneath
	// reports each message once the wrapper has passed it on or dropped
	// it, so that the fault changes only between messages, without waiting
	// for one (a wait that a loaded machine outlasts).
	sn := &seenNode{Node: fx.inner, seen: make(chan string, 4)}
	g := conformance.Wrap(sn)
	seen := sn.seen
	got := make(chan string, 4)
	stop, err := g.Watch(ctx, "ch", func(p string) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	next := func(ch chan string, what string) string {
		t.Helper()
		select {
		case p := <-ch:
			return p
		case <-time.After(time.Minute): // a bound only against hanging
			t.Fatalf("no message %s within a minute", what)
			return ""
		}
	}
	g.Set(conformance.Fault{Down: true})
	fx.c.Publish(ctx, "ch", "dropped")
	if p := next(seen, "reached the node"); p != "dropped" {
		t.Fatalf("the node got %q, want %q", p, "dropped")
	}
	g.Heal()
	fx.c.Publish(ctx, "ch", "delivered")
	if p := next(seen, "reached the node"); p != "delivered" {
		t.Fatalf("the node got %q, want %q", p, "delivered")
	}
	if p := next(got, "after Heal"); p != "delivered" {
		t.Fatalf("got %q, want only the message published while healthy (a down node delivered it)", p)
	}
}

// A seenNode reports on seen every message its Watch delivered, once the
// watcher's notify returned.
type seenNode struct {
	driver.Node
	seen chan string
}

func (s *seenNode) Watch(ctx context.Context, channel string, notify func(string)) (func(), error) {
	return s.Node.Watch(ctx, channel, func(p string) {
		notify(p)
		s.seen <- p
	})
}

// A memNode is a Node in memory whose every call of Run replies [1]; it
// does not wait, so it runs inside a synctest bubble.
type memNode struct {
	driver.Node // RunWait and Watch are not used
	runs        atomic.Int64
}

func (m *memNode) Run(ctx context.Context, calls []driver.Call) {
	for i := range calls {
		m.runs.Add(1)
		if err := ctx.Err(); err != nil {
			calls[i].Reply, calls[i].Err = nil, err
			continue
		}
		calls[i].Reply, calls[i].Err = []int64{1}, nil
	}
}
