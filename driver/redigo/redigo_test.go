package redigo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// runSource runs src once on n with EVAL.
func runSource(ctx context.Context, n driver.Node, src string, keys []string, args ...string) ([]int64, error) {
	c := []driver.Call{{Source: src, Keys: keys, Args: args}}
	n.Run(ctx, c)
	return c[0].Reply, c[0].Err
}

// The single-instance strategy keeps the Strategy contract, and the lock
// family theirs, over the driver.
func TestConformanceSingle(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	addr := harness.StartServer(t)
	node := newNode(t, addr)
	topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: []string{addr}}
	newStrategy := func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) }
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}

// WithName names the node.
func TestWithName(t *testing.T) {
	const addr = "127.0.0.1:6379"
	if got := newNode(t, addr).String(); got != addr {
		t.Fatalf("String() = %q, want the name given to WithName, %q", got, addr)
	}
}

func TestNilPool(t *testing.T) {
	if n := redigo.New(nil); n != nil {
		t.Fatalf("New(nil) = %v, want nil", n)
	}
	if _, err := strategy.NewSingle(redigo.New(nil)); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("NewSingle over New(nil): %v, want ErrInvalid", err)
	}
}

// A frozen server (SIGSTOP) never answers; the call returns at its deadline
// although the connection's read timeout is 30s.
func TestDeadlineOnFrozenServer(t *testing.T) {
	srv := redistest.Start(t)
	n := newNode(t, srv.Addr)
	if _, err := runSource(context.Background(), n, "return {1}", nil); err != nil {
		t.Fatal(err)
	}
	srv.Freeze(t)
	defer srv.Thaw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := runSource(ctx, n, "return {1}", nil)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 2*time.Second {
		t.Fatalf("Run on a frozen server: %v after %v, want context.DeadlineExceeded near 100ms", err, took)
	}
}

// A closed pool is an error waiting cannot cure: Lock returns it at once.
func TestClosedPoolIsPermanent(t *testing.T) {
	srv := redistest.Start(t)
	p := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", srv.Addr) }}
	require.NoError(t, p.Close())
	calls := []driver.Call{{SHA1: "0000000000000000000000000000000000000000", Keys: []string{"k"}}}
	redigo.New(p).Run(context.Background(), calls)
	assert.ErrorIs(t, calls[0].Err, driver.ErrClosed)
	assert.True(t, dlm.Permanent(calls[0].Err))
}
