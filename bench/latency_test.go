package main

import (
	"context"
	"testing"
	"time"

	goredislib "github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/redistest"
)

// -rtt: a round trip through withRTT's proxy takes at least the RTT, and
// stop closes the proxy.
func TestWithRTT(t *testing.T) {
	srv := redistest.Start(t)
	const rtt = 200 * time.Millisecond
	addrs, stop, err := withRTT([]string{srv.Addr}, rtt)
	if err != nil {
		t.Fatal(err)
	}
	c := goredislib.NewClient(&goredislib.Options{Addr: addrs[0], MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < rtt {
		t.Errorf("a round trip through a %v proxy took %v", rtt, took)
	}
	stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("a round trip after stop succeeded")
	}
	if _, _, err := withRTT([]string{srv.Addr}, 0); err == nil {
		t.Error("-rtt 0 accepted")
	}
}
