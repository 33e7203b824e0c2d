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
