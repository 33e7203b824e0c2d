package rueidis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/strategy"
)

// (The examples are compiled, not run: they need a server at
// 127.0.0.1:6379; the driver's tests run it on servers they start.)
//
// Watch returns once the subscription is confirmed: a message published
// right afterwards arrives.
func ExampleNode_Watch() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableCache: true})
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
	client.Do(context.Background(), client.B().Publish().Channel("dlm:{orders:42}").Message("released").Build())
	fmt.Println(<-got)
	// Prints: released
}

// Run sends several calls in one round trip (one per primary on a
// Cluster) and sets each call's Reply or Err.
func ExampleNode_Run() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableCache: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	const incr = "return {redis.call('INCRBY', KEYS[1], ARGV[1])}"
	calls := []driver.Call{
		{Source: incr, Keys: []string{"a"}, Args: []string{"1"}},
		{Source: incr, Keys: []string{"a"}, Args: []string{"2"}},
		{Source: incr, Keys: []string{"b"}, Args: []string{"5"}},
	}
	rueidisnode.New(client).Run(context.Background(), calls)
	for _, c := range calls {
		fmt.Println(c.Reply, c.Err)
	}
	// Prints, on a server without keys a and b:
	// [1] <nil>
	// [3] <nil>
	// [5] <nil>
}

// The failover strategy over a rueidis Sentinel client: every lock is
// acknowledged by the primary's replicas (WAIT on the script's connection)
// before it is granted.
func ExampleNode_RunWait() {
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
