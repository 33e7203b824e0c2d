package strategy_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// On a real Cluster, locks on odd keys (a '}' first, a tag, a '}' inside,
// an empty tag) are taken, extended and released without CROSSSLOT, and a
// tagged key's lock lives on the master of its tag.
func TestLockKeysOnCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	s, err := strategy.NewSingle(goredis.New(c))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"}first", "{user1}:profile", "tenant7}1", "{}x", "plain"} {
		if _, err := s.Acquire(ctx, k, "tok", 10*time.Second); err != nil {
			t.Fatalf("Acquire %q: %v", k, err)
		}
		if _, err := s.Extend(ctx, k, "tok", 10*time.Second); err != nil {
			t.Errorf("Extend %q: %v", k, err)
		}
		if err := s.Release(ctx, k, "tok"); err != nil {
			t.Errorf("Release %q: %v", k, err)
		}
	}
	if _, err := s.Acquire(ctx, "{user1}:profile", "tok", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	data, err := c.MasterForKey(ctx, "{user1}:data")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := data.Exists(ctx, "dlm:t:{user1}:profile").Result(); err != nil || n != 1 {
		t.Errorf("the lock on {user1}:profile is not on the master of {user1}:data (%s): %d, %v", data, n, err)
	}
}
