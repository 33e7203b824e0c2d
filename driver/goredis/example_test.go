package goredis_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// exampleAddr is the address of the redis-server the examples lock on,
// which TestMain starts for them: a real server, as a program has.
var exampleAddr string

func TestMain(m *testing.M) {
	flag.Parse()
	// Up to 8 tests at a time, not GOMAXPROCS: the suites (TestServerMatrix's
	// nine among them) mostly wait, on stalled servers, deadlines and
	// expiry, and each test owns its servers.
	redistest.WaitingParallel(8)
	stop := startExampleServer()
	code := m.Run()
	stop()
	os.Exit(code)
}

// startExampleServer starts the examples' redis-server and returns what
// stops it. Without redis-server on PATH the examples are skipped, saying
// so, or, under DLM_REQUIRE_REDIS=1, the test binary fails.
func startExampleServer() (stop func()) {
	dir, err := os.MkdirTemp("", "goredis-example")
	if err == nil {
		var srv *redistest.Server
		if srv, err = redistest.Launch(redistest.Config{Dir: dir}); err == nil {
			exampleAddr = srv.Addr
			return func() { srv.Stop(); _ = os.RemoveAll(dir) }
		}
		_ = os.RemoveAll(dir)
	}
	if os.Getenv(redistest.RequireEnv) == "1" {
		fmt.Fprintf(os.Stderr, "goredis: no redis-server for the examples: %v; %s=1 requires one\n", err, redistest.RequireEnv)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "goredis: no redis-server for the examples (%v): they are skipped\n", err)
	skip := "^Example"
	if s := flag.Lookup("test.skip").Value.String(); s != "" {
		skip = s + "|" + skip
	}
	_ = flag.Set("test.skip", skip)
	return func() {}
}

// A Manager over one Redis server through a go-redis client.
func Example() {
	// ContextTimeoutEnabled makes go-redis bound each call by its context's
	// deadline on the socket (without it the Node waits for the reply in a
	// goroutine of its own: see the package doc).
	client := redis.NewClient(&redis.Options{Addr: exampleAddr /* "127.0.0.1:6379", say */, ContextTimeoutEnabled: true})
	defer client.Close()

	single, err := strategy.NewSingle(goredis.New(client))
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(single, dlm.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lock, err := m.Lock(ctx, "example:orders:42")
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", lock.Key(), "with a fence:", lock.Fence() > 0)

	_, err = m.TryLock(ctx, "example:orders:42")
	fmt.Println("refused while held:", errors.Is(err, dlm.ErrNotAcquired))

	if err := lock.Unlock(ctx); err != nil {
		panic(err)
	}
	again, err := m.TryLock(ctx, "example:orders:42")
	if err != nil {
		panic(err)
	}
	fmt.Println("after Unlock, a greater fence:", again.Fence() > lock.Fence())
	_ = again.Unlock(ctx)
	// Output:
	// holding example:orders:42 with a fence: true
	// refused while held: true
	// after Unlock, a greater fence: true
}

// Dial makes the client too, from an Endpoint (as config.Config.Open
// does): a server's address here, or Sentinels and a master name, or a
// Cluster's nodes.
func ExampleDial() {
	node, client, err := goredis.Dial(context.Background(), nodekit.Endpoint{Addr: exampleAddr})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	single, err := strategy.NewSingle(node)
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(single)
	if err != nil {
		panic(err)
	}
	lock, err := m.TryLock(context.Background(), "example:report")
	if err != nil {
		panic(err)
	}
	defer lock.Unlock(context.Background())
	fmt.Println("holding", lock.Key())
	// Output: holding example:report
}
