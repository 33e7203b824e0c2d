package rueidis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/strategy"
)

// Watch returns once the subscription is confirmed: a message published
// right afterwards arrives.
func ExampleNode_Watch() {
	srv, err := miniredis.Run()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	node := rueidisnode.New(client)

	got := make(chan string, 1)
	stop, err := node.Watch(context.Background(), "dlm:{orders:42}", func(payload string) { got <- payload })
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	srv.Publish("dlm:{orders:42}", "released")
	fmt.Println(<-got)
	// Output: released
}

// EvalSHAMany runs a script once per call in one round trip; RunMany uses
// it and loads the script first when the server lacks it.
func ExampleNode_EvalSHAMany() {
	srv, err := miniredis.Run()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	incr := dlm.NewScript("return {redis.call('INCRBY', KEYS[1], ARGV[1])}")
	res, err := incr.RunMany(context.Background(), rueidisnode.New(client), []dlm.ScriptCall{
		{Keys: []string{"a"}, Args: []string{"1"}},
		{Keys: []string{"a"}, Args: []string{"2"}},
		{Keys: []string{"b"}, Args: []string{"5"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range res {
		fmt.Println(r.Reply, r.Err)
	}
	// Output:
	// [1] <nil>
	// [3] <nil>
	// [5] <nil>
}

// The failover strategy over a rueidis Sentinel client: every lock is
// acknowledged by the primary's replicas (WAIT on the script's connection)
// before it is granted.
func ExampleNode_EvalWait() {
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"},
		Sentinel:    rueidis.SentinelOption{MasterSet: "mymaster"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	failover, err := strategy.NewFailover(rueidisnode.New(client), strategy.WithWaitTimeout(100*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := dlm.New(failover, dlm.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	lock, err := m.TryLock(context.Background(), "orders:42")
	if err != nil {
		fmt.Println(err) // an *strategy.AckError when replicas did not acknowledge
		return
	}
	defer lock.Unlock(context.Background())
}
