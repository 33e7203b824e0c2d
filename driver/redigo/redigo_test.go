package redigo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

func newPool(t testing.TB, addr string) *redis.Pool {
	p := &redis.Pool{
		MaxIdle:     64,
		IdleTimeout: time.Minute,
		Dial: func() (redis.Conn, error) {
			return redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(30*time.Second))
		},
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	node := redigo.New(newPool(t, srv.Addr)).WithName("redigo " + srv.Addr)
	t.Run("Node", func(t *testing.T) {
		conformance.RunNode(t, func(*testing.T) dlm.Node { return node })
	})
	t.Run("Single", func(t *testing.T) {
		conformance.RunStrategy(t, conformance.Topology{Nodes: func(*testing.T) []dlm.Node { return []dlm.Node{node} }},
			func(nodes []dlm.Node) (dlm.Strategy, error) { return strategy.NewSingle(nodes[0]) })
	})
}

func TestNilPool(t *testing.T) {
	if n := redigo.New(nil); n != nil {
		t.Fatalf("New(nil) = %v, want nil", n)
	}
	if _, err := strategy.NewSingle(redigo.New(nil)); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("NewSingle over New(nil): %v, want ErrInvalid", err)
	}
}

// A frozen server (SIGSTOP) never answers; the call returns at its deadline
// although the connection's read timeout is 30s.
func TestDeadlineOnFrozenServer(t *testing.T) {
	srv := redistest.Start(t)
	n := redigo.New(newPool(t, srv.Addr))
	if _, err := n.Eval(context.Background(), "return {1}", nil); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := n.Eval(ctx, "return {1}", nil)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("Eval on a frozen server: %v after %v, want context.DeadlineExceeded near 100ms", err, took)
	}
}
