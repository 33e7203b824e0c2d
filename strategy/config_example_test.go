package strategy_test

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

// The strategy comes from a string (an environment variable, a flag, a file);
// the program builds the nodes from its addresses with its own driver.
func ExampleParseURL() {
	cfg, err := strategy.ParseURL("redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003?ttl=10s&timeout=50ms")
	if err != nil {
		panic(err)
	}
	var nodes []dlm.Node
	for _, addr := range cfg.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		nodes = append(nodes, goredis.New(c))
	}
	s, err := cfg.New(nodes...) // does not dial
	if err != nil {
		panic(err)
	}
	fmt.Printf("%T quorum %d\n", s, s.(*strategy.Redlock).Quorum())
	fmt.Println(cfg)

	// Fields that do not apply, and bad values, are errors naming the field.
	_, err = strategy.ParseURL("redlock://127.0.0.1:7001?ack=all")
	fmt.Println(err)
	_, err = strategy.ParseURL("sentinel://127.0.0.1:26379/mymaster?ack=most")
	fmt.Println(err)
	// Output:
	// *strategy.Redlock quorum 2
	// redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003?timeout=50ms&ttl=10s
	// dlm: invalid argument: strategy config: ack: applies only to the failover strategy, not to redlock
	// dlm: invalid argument: strategy config: ack: ack policy "most": want all, majority, none or a number ≥ 1
}

// A Sentinel deployment: go-redis finds the primary through the Sentinels.
func ExampleConfig_New() {
	cfg, err := strategy.ParseURL("sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster?ack=all&replicas=2")
	if err != nil {
		panic(err)
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: cfg.Master, SentinelAddrs: cfg.Addrs, ContextTimeoutEnabled: true,
		Username: cfg.Username, Password: cfg.Password,
		SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword,
	})
	defer client.Close()
	s, err := cfg.New(goredis.New(client))
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
	fmt.Printf("%T %v\n", s, err == nil && m != nil)
	// Output: *strategy.Failover true
}
