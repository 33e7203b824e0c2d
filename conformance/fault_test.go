package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

const incr = "return {redis.call('INCR', KEYS[1])}"

func TestFaultyNode(t *testing.T) {
	c := redistest.Start(t).Client(t)
	inner := goredis.New(c)
	ctx := context.Background()
	count := func(key string) int64 {
		t.Helper()
		n, err := c.Get(ctx, key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return n
	}

	t.Run("Down", func(t *testing.T) {
		f := conformance.Down(inner)
		if _, err := f.Eval(ctx, incr, []string{"down"}); !errors.Is(err, conformance.ErrDown) {
			t.Fatalf("Eval on a down node: %v, want ErrDown", err)
		}
		if n := count("down"); n != 0 {
			t.Fatalf("a down node ran the script (counter %d)", n)
		}
		if made, reached := f.Calls(); made != 1 || reached != 0 {
			t.Fatalf("Calls() = %d, %d; want 1, 0", made, reached)
		}
		f.Heal()
		if r, err := f.Eval(ctx, incr, []string{"down"}); err != nil || len(r) != 1 || r[0] != 1 {
			t.Fatalf("healed node: %v, %v", r, err)
		}
	})

	t.Run("ReplyLost", func(t *testing.T) {
		f := conformance.ReplyLost(inner)
		if _, err := f.Eval(ctx, incr, []string{"lost"}); !errors.Is(err, conformance.ErrReplyLost) {
			t.Fatalf("Eval on a node losing replies: %v, want ErrReplyLost", err)
		}
		if n := count("lost"); n != 1 {
			t.Fatalf("the script should have run once, counter %d", n)
		}
		sc := dlm.NewScript("-- fault test\n" + incr)
		if _, err := f.EvalSHA(ctx, sc.SHA1(), []string{"lost"}); !errors.Is(err, dlm.ErrNoScript) {
			t.Fatalf("EvalSHA of an unknown script: %v, want the NOSCRIPT error to come through", err)
		}
		if _, err := sc.Run(ctx, f, []string{"lost"}); !errors.Is(err, conformance.ErrReplyLost) {
			t.Fatalf("Script.Run: %v, want ErrReplyLost after the EVAL fallback ran", err)
		}
		if n := count("lost"); n != 2 {
			t.Fatalf("Script.Run's EVAL should have run, counter %d", n)
		}
	})

	t.Run("Slow", func(t *testing.T) {
		f := conformance.Slow(inner, 300*time.Millisecond)
		cx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := f.Eval(cx, incr, []string{"slow"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow node, short deadline: %v, want DeadlineExceeded", err)
		}
		if n := count("slow"); n != 0 {
			t.Fatalf("a call whose context ended during the delay reached the node (counter %d)", n)
		}
		start := time.Now()
		if _, err := f.Eval(ctx, incr, []string{"slow"}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Fatalf("slow node answered after %v, want at least its 300ms delay", took)
		}
	})

	t.Run("Unwrap", func(t *testing.T) {
		f := conformance.Wrap(conformance.Wrap(inner))
		type clientNode interface{ Client() redis.UniversalClient }
		got, ok := dlm.NodeAs[clientNode](f)
		if !ok || got.Client() != c {
			t.Fatalf("NodeAs through two wrappers: %v, %v", got, ok)
		}
		if s := fmt.Sprint(f); s != "faulty(faulty("+inner.String()+"))" {
			t.Fatalf("String() = %q", s)
		}
		if _, ok := dlm.NodeAs[interface{ NoSuchAbility() }](f); ok {
			t.Fatal("NodeAs found an ability nobody has")
		}
		if _, ok := dlm.NodeAs[fmt.Stringer](nil); ok {
			t.Fatal("NodeAs(nil) found something")
		}
	})
}

func TestFaultyNodeWithAbilities(t *testing.T) {
	c := redistest.Start(t).Client(t)
	inner := goredis.New(c)
	ctx := context.Background()
	f := conformance.Wrap(inner)
	n := f.WithAbilities()
	rw, ok1 := n.(dlm.ReplicaWaiter)
	pl, ok2 := n.(dlm.Pipeliner)
	nt, ok3 := n.(dlm.Notifier)
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("WithAbilities over go-redis: ReplicaWaiter %v, Pipeliner %v, Notifier %v; want all", ok1, ok2, ok3)
	}
	if u, ok := n.(interface{ Unwrap() dlm.Node }); !ok || u.Unwrap() != dlm.Node(inner) {
		t.Fatal("WithAbilities does not unwrap to the wrapped node")
	}
	if _, ok := conformance.Wrap(conformance.Wrap(inner)).WithAbilities().(dlm.Pipeliner); ok {
		t.Fatal("WithAbilities over a Node without abilities (a FaultyNode) claims dlm.Pipeliner")
	}
	w := dlm.Wait{Timeout: time.Second}
	sc := dlm.NewScript(incr)
	if _, err := sc.Run(ctx, inner, []string{"load"}); err != nil {
		t.Fatal(err)
	}

	f.Set(conformance.Fault{Down: true})
	if _, _, err := rw.EvalWait(ctx, w, incr, []string{"wa"}); !errors.Is(err, conformance.ErrDown) {
		t.Errorf("EvalWait on a down node: %v, want ErrDown", err)
	}
	if _, err := pl.EvalSHAMany(ctx, sc.SHA1(), []dlm.ScriptCall{{Keys: []string{"wa"}}}); !errors.Is(err, conformance.ErrDown) {
		t.Errorf("EvalSHAMany on a down node: %v, want ErrDown", err)
	}
	if _, err := nt.Watch(ctx, "ch", func(string) {}); !errors.Is(err, conformance.ErrDown) {
		t.Errorf("Watch on a down node: %v, want ErrDown", err)
	}
	if v, _ := c.Get(ctx, "wa").Int64(); v != 0 {
		t.Fatalf("a down node ran the script (counter %d)", v)
	}

	f.Set(conformance.Fault{LoseReply: true})
	if r, _, err := rw.EvalWait(ctx, w, incr, []string{"wa"}); !errors.Is(err, conformance.ErrReplyLost) || r != nil {
		t.Errorf("EvalWait losing its reply: %v %v, want ErrReplyLost", r, err)
	}
	res, err := pl.EvalSHAMany(ctx, sc.SHA1(), []dlm.ScriptCall{{Keys: []string{"wa"}}})
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, conformance.ErrReplyLost) {
		t.Errorf("EvalSHAMany losing its replies: %+v %v, want one ErrReplyLost result", res, err)
	}
	if _, _, err := rw.EvalSHAWait(ctx, w, dlm.NewScript("return {1} -- unknown").SHA1(), nil); !errors.Is(err, dlm.ErrNoScript) {
		t.Errorf("EvalSHAWait of an unknown script losing replies: %v, want NOSCRIPT to come through", err)
	}
	if v, _ := c.Get(ctx, "wa").Int64(); v != 2 {
		t.Fatalf("counter %d after two applied calls with lost replies, want 2", v)
	}
	if made, reached := f.Calls(); made != 6 || reached != 3 {
		t.Errorf("Calls() = %d, %d; want 6 made, 3 reached", made, reached)
	}

	f.Heal()
	got := make(chan string, 4)
	stop, err := nt.Watch(ctx, "ch", func(p string) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	f.Set(conformance.Fault{Down: true})
	c.Publish(ctx, "ch", "dropped")
	select {
	case p := <-got:
		t.Fatalf("a down node delivered %q", p)
	case <-time.After(500 * time.Millisecond):
	}
	f.Heal()
	c.Publish(ctx, "ch", "delivered")
	select {
	case p := <-got:
		if p != "delivered" {
			t.Fatalf("got %q, want only the message published while healthy", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message after Heal")
	}
}
