package fencing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlmgo/dlm/driver"

	redigolib "github.com/gomodule/redigo/redis"
	rueidislib "github.com/redis/rueidis"

	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/fencing"
	"github.com/dlmgo/dlm/internal/redistest"
)

// TestRedisDrivers: the fenced script runs over the redigo and rueidis
// drivers as over go-redis (the first call loads it with EVAL after
// NOSCRIPT).
func TestRedisDrivers(t *testing.T) {
	srv := redistest.Start(t)
	check := srv.Client(t)
	nodes := map[string]func(t *testing.T) driver.Node{
		"redigo": func(t *testing.T) driver.Node {
			p := &redigolib.Pool{MaxIdle: 2, DialContext: func(ctx context.Context) (redigolib.Conn, error) {
				return redigolib.DialContext(ctx, "tcp", srv.Addr)
			}}
			t.Cleanup(func() { _ = p.Close() })
			return redigo.New(p)
		},
		"rueidis": func(t *testing.T) driver.Node {
			c, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return rueidis.New(c)
		},
	}
	for name, node := range nodes {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			check.ScriptFlush(ctx)
			r := fencing.Redis{Node: node(t)}
			key := name + ":k"
			if err := r.Set(ctx, name, 3, key, "a", 0); err != nil {
				t.Fatal(err)
			}
			if err := r.Set(ctx, name, 2, key, "b", 0); !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("smaller fence: %v, want ErrStale", err)
			}
			if n, err := r.HSet(ctx, name, 3, key+":h", "f", "v"); err != nil || n != 1 {
				t.Fatalf("HSet = %d, %v", n, err)
			}
			if ok, err := r.Del(ctx, name, 4, key); err != nil || !ok {
				t.Fatalf("Del = %v, %v", ok, err)
			}
			if check.Exists(ctx, key).Val() != 0 {
				t.Fatal("key still there after Del")
			}
		})
	}
}
