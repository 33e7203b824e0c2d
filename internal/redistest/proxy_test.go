package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/redistest"
)

func TestProxyForwardsAndBlackholes(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	p.Blackhole(true)
	if !p.Blackholed() {
		t.Fatal("Blackholed() = false after Blackhole(true)")
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Get(tctx, "k").Err()
	cancel()
	if err == nil {
		t.Fatal("a command got a reply through a blackholed proxy")
	}
	// The server itself still answers.
	direct := srv.Client(t)
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("direct GET = %q, %v", v, err)
	}

	p.Blackhole(false)
	p.CloseConns() // the old stream lost bytes; start clean
	var v string
	for range 20 {
		if v, err = c.Get(ctx, "k").Result(); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || v != "v" {
		t.Fatalf("after the blackhole ended: %q, %v", v, err)
	}
}
