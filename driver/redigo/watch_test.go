package redigo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/internal/redistest"
)

// A call on a frozen server whose context is cancelled (it has no
// deadline) returns with context.Canceled once the watch closes its
// connection, not at the connection's 30s read timeout (a net timeout
// error); the pool then serves the next call on a good connection.
func TestCancelOnFrozenServer(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, srv.Addr)
	if _, err := runSource(context.Background(), n, "return {1}", nil); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(50*time.Millisecond, cancel)
	defer stop.Stop()
	_, err := runSource(ctx, n, "return {1}", nil)
	var ne interface{ Timeout() bool }
	if !errors.Is(err, context.Canceled) || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("Run cancelled on a frozen server: %v, want context.Canceled from a closed connection", err)
	}
	srv.Thaw(t)
	if r, err := runSource(context.Background(), n, "return {7}", nil); err != nil || len(r) != 1 || r[0] != 7 {
		t.Fatalf("Run after the thaw: %v, %v, want [7]", r, err)
	}
}
