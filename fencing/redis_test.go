package fencing_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/fencing"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

// TestRedisFencedWrites: on a real redis-server, a smaller fence is
// refused with nothing written, equal and larger ones write, and fences
// beyond 2^53 (where a Lua number would round) still compare exactly.
func TestRedisFencedWrites(t *testing.T) {
	c := redistest.Start(t).Client(t)
	r := fencing.Redis{Node: goredis.New(c)}
	ctx := context.Background()
	get := func(key string) string { v, _ := c.Get(ctx, key).Result(); return v }

	if err := r.Set(ctx, "orders:42", 5, "orders:42:total", "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(ctx, "orders:42", 3, "orders:42:total", "b", 0); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Set with fence 3 after 5 = %v, want ErrStale", err)
	}
	if v := get("orders:42:total"); v != "a" {
		t.Fatalf("value %q after a refused Set, want a", v)
	}
	if err := r.Set(ctx, "orders:42", 5, "orders:42:total", "c", time.Minute); err != nil {
		t.Fatalf("equal fence: %v", err)
	}
	if v, ttl := get("orders:42:total"), c.PTTL(ctx, "orders:42:total").Val(); v != "c" || ttl <= 0 {
		t.Fatalf("value %q ttl %v, want c with an expiry", v, ttl)
	}
	if rec := get(fencing.RecordKey("orders:42", "orders:42:total")); rec != "5" {
		t.Fatalf("record %q, want 5", rec)
	}

	// Hash writes, and a command error leaves the record alone.
	if n, err := r.HSet(ctx, "orders:42", 6, "orders:42:h", "a", "1", "b", "2"); err != nil || n != 2 {
		t.Fatalf("HSet = %d, %v", n, err)
	}
	if _, err := r.HSet(ctx, "orders:42", 4, "orders:42:h", "a", "9"); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("HSet with fence 4 after 6 = %v, want ErrStale", err)
	}
	if _, err := r.HSet(ctx, "orders:42", 8, "orders:42:total", "a", "9"); err == nil || errors.Is(err, fencing.ErrStale) {
		t.Fatalf("HSet on a string key = %v, want the server's WRONGTYPE", err)
	}
	if rec := get(fencing.RecordKey("orders:42", "orders:42:h")); rec != "6" {
		t.Fatalf("record %q after a failed HSet, want 6", rec)
	}
	// Many fields go in chunks (a script's stack is bounded).
	many := make([]string, 0, 2000)
	for i := range 1000 {
		many = append(many, "f"+strconv.Itoa(i), "v")
	}
	if n, err := r.HSet(ctx, "orders:42", 6, "orders:42:many", many...); err != nil || n != 1000 {
		t.Fatalf("HSet of 1000 fields = %d, %v", n, err)
	}
	if ok, err := r.Del(ctx, "orders:42", 3, "orders:42:h"); !errors.Is(err, fencing.ErrStale) || ok {
		t.Fatalf("Del with fence 3 = %v, %v, want ErrStale", ok, err)
	}
	if ok, err := r.Del(ctx, "orders:42", 7, "orders:42:h"); err != nil || !ok {
		t.Fatalf("Del = %v, %v", ok, err)
	}
	if c.Exists(ctx, "orders:42:h").Val() != 0 {
		t.Fatal("hash still there after Del")
	}

	// Exact comparison beyond 2^53 and up to the largest uint64.
	big := uint64(1<<53 + 1)
	if err := r.Advance(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	if err := r.Advance(ctx, "big", big-1); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Advance(2^53) after 2^53+1 = %v, want ErrStale", err)
	}
	if err := r.Advance(ctx, "big", math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if err := r.Advance(ctx, "big", math.MaxUint64-1); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Advance(max-1) after max = %v, want ErrStale", err)
	}
}

// TestRedisWriters: 64 writers with shuffled fences 1..64 write a field
// each to one hash at once; the hash holds exactly the accepted writes,
// the record ends at 64, and every refused fence is below an accepted one.
// (The order in which the server ran the scripts is not observed here; the
// PostgreSQL test checks the committed order.)
func TestRedisWriters(t *testing.T) {
	c := redistest.Start(t).Client(t)
	r := fencing.Redis{Node: goredis.New(c)}
	ctx := context.Background()
	var mu sync.Mutex
	var accepted, refused []uint64
	var wg sync.WaitGroup
	for _, f := range rand.Perm(64) {
		fence := uint64(f + 1)
		wg.Go(func() {
			_, err := r.HSet(ctx, "doc", fence, "doc:log", strconv.FormatUint(fence, 10), strconv.FormatInt(time.Now().UnixNano(), 10))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted = append(accepted, fence)
			case errors.Is(err, fencing.ErrStale):
				refused = append(refused, fence)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(accepted)+len(refused) != 64 || len(accepted) == 0 {
		t.Fatalf("%d accepted, %d refused", len(accepted), len(refused))
	}
	fields := c.HKeys(ctx, "doc:log").Val()
	if len(fields) != len(accepted) {
		t.Fatalf("hash has %d fields, %d writes accepted", len(fields), len(accepted))
	}
	if rec := c.Get(ctx, fencing.RecordKey("doc", "doc:log")).Val(); rec != "64" {
		t.Fatalf("record %q, want 64", rec)
	}
	top := uint64(0)
	for _, f := range accepted {
		top = max(top, f)
	}
	for _, f := range refused {
		if f >= top {
			t.Fatalf("fence %d refused though no larger one was accepted", f)
		}
	}
	t.Logf("64 writers: %d accepted, %d refused", len(accepted), len(refused))
}

// TestRecordKeySlot: a record lives in its data key's slot for keys with
// a hash tag, without one, and with a '}' but no tag.
func TestRecordKeySlot(t *testing.T) {
	keys := []string{"orders:42", "{user1}:profile", "tenant7}a", "}x", "{}x", "a{b", "", "ü"}
	for range 2000 {
		b := make([]byte, rand.IntN(12))
		for i := range b {
			b[i] = "ab{}:x"[rand.IntN(6)]
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		for _, res := range []string{"r", "{other}", "x}y"} {
			if got, want := eval.Slot(fencing.RecordKey(res, k)), eval.Slot(k); got != want && k != "" {
				t.Fatalf("RecordKey(%q, %q) = %q in slot %d, the key is in %d", res, k, fencing.RecordKey(res, k), got, want)
			}
		}
	}
}

// TestRedisCluster: on a 3-master Cluster, fenced writes to keys of many
// slots (each script names the record and the data key: a CROSSSLOT error
// would fail it) pass and refuse as on one server.
func TestRedisCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	t.Cleanup(func() { _ = c.Close() })
	r := fencing.Redis{Node: goredis.New(c)}
	ctx := context.Background()
	for i, key := range []string{"orders:1", "orders:2", "{user1}:profile", "tenant7}a", "}x", "{}x", "k:" + strings.Repeat("z", 100)} {
		if err := r.Set(ctx, "res", uint64(10+i), key, "v", 0); err != nil {
			t.Fatalf("Set %q: %v", key, err)
		}
		if err := r.Set(ctx, "res", uint64(9+i), key, "w", 0); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("Set %q with a smaller fence = %v, want ErrStale", key, err)
		}
		if v := c.Get(ctx, key).Val(); v != "v" {
			t.Fatalf("%q = %q, want v", key, v)
		}
	}
}

// TestRedisBadInput: bad arguments and a closed client give clear errors
// and write nothing.
func TestRedisBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	r := fencing.Redis{Node: goredis.New(c)}
	ctx := context.Background()
	huge := strings.Repeat("x", 1<<20)
	for name, err := range map[string]error{
		"fence 0":           r.Set(ctx, "r", 0, "k", "v", 0),
		"1 MiB resource":    r.Set(ctx, huge, 1, "k", "v", 0),
		"empty resource":    r.Advance(ctx, "", 1),
		"empty key":         r.Set(ctx, "r", 1, "", "v", 0),
		"negative ttl":      r.Set(ctx, "r", 1, "k", "v", -time.Second),
		"odd HSet":          func() error { _, err := r.HSet(ctx, "r", 1, "k", "f"); return err }(),
		"empty HSet":        func() error { _, err := r.HSet(ctx, "r", 1, "k"); return err }(),
		"nil node":          fencing.Redis{}.Advance(ctx, "r", 1),
		"Del fence 0":       func() error { _, err := r.Del(ctx, "r", 0, "k"); return err }(),
		"resource with NUL": r.Advance(ctx, "a\x00", 1),
	} {
		if !errors.Is(err, dlm.ErrInvalid) {
			t.Errorf("%s: %v, want dlm.ErrInvalid", name, err)
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("%d keys after bad input, want none", n)
	}
	closed := redis.NewClient(&redis.Options{Addr: srv.Addr})
	_ = closed.Close()
	if err := (fencing.Redis{Node: goredis.New(closed)}).Set(ctx, "r", 1, "k", "v", 0); !errors.Is(err, dlm.ErrClosed) {
		t.Fatalf("closed client: %v, want dlm.ErrClosed", err)
	}
}
