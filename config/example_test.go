package config_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// The deployment comes from a string (an environment variable, a flag, a
// file): single://host:6379, redlock://h1:6379,h2:6379,h3:6379,
// sentinel://s1:26379,s2:26379,s3:26379/mymaster?ack=all or
// failover://primary:6379 or cluster://n1:7000,n2:7001, with user:password@
// and options such as ?ttl=10s.
// The program picks the driver: goredis.Dial, redigo.Dial, rueidis.Dial or
// valkeygo.Dial.
// It needs a running server, so it has no output; TestExampleOpen runs it.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, closer, err := config.Open(ctx, os.Getenv("LOCK_URL"), goredis.Dial)
	if err != nil {
		fmt.Println(err) // errors.Is(err, dlm.ErrInvalid) for a bad URL; it names the field
		return
	}
	defer closer.Close()

	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
	fmt.Println("fence", lock.Fence()) // pass it to the storage the lock protects
}

// ExampleOpen against a real server with a password.
func TestExampleOpen(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	t.Setenv("LOCK_URL", "single://:s3cret@"+srv.Addr+"?ttl=5s")
	ExampleOpen()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret"})
	defer c.Close()
	assert.Equal(t, "1", c.Get(context.Background(), fenceOf("orders:42")).Val(), "the example took the lock")
	assert.Zero(t, c.Exists(context.Background(), "dlm:{orders:42}").Val(), "and released it")
}

// A Config also comes from a URL alone, without dialling: String redacts
// the passwords, and bad fields are errors that name them.
func ExampleParseURL() {
	cfg, err := config.ParseURL("redlock://:s3cret@127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003?ttl=10s&timeout=50ms")
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Strategy, len(cfg.Addrs), "masters")
	fmt.Println(cfg)

	_, err = config.ParseURL("redlock://127.0.0.1:7001?ack=all")
	fmt.Println(err)
	_, err = config.ParseURL("sentinel://127.0.0.1:26379/mymaster?ack=most")
	fmt.Println(err)
	_, err = config.ParseURL("failover://127.0.0.1:26379/mymaster")
	fmt.Println(err)
	// Output:
	// redlock 3 masters
	// redlock://:xxxxx@127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003?timeout=50ms&ttl=10s
	// dlm: invalid argument: config: ack: applies only to the failover strategy, not to redlock
	// dlm: invalid argument: config: ack: ack policy "most": want all, majority, none or a number ≥ 1
	// dlm: invalid argument: config: master: failover:// takes the primary's address and no path; for a primary found through Sentinel use sentinel://s1:26379,s2:26379/mymaster
}

// A Redis Cluster is given by some of its nodes; the strategy runs on it as
// one node (single, or failover with strategy=failover). redigo.Dial
// refuses it: redigo has no Cluster client.
func ExampleParseURL_cluster() {
	cfg, err := config.ParseURL("cluster://:s3cret@127.0.0.1:7000,127.0.0.1:7001?strategy=failover&ack=all&ttl=10s")
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Strategy, cfg.Cluster, cfg.Addrs)
	fmt.Println(cfg)

	_, err = config.ParseURL("cluster://127.0.0.1:7000?strategy=redlock")
	fmt.Println(err)
	// Output:
	// failover true [127.0.0.1:7000 127.0.0.1:7001]
	// cluster://:xxxxx@127.0.0.1:7000,127.0.0.1:7001?ack=all&strategy=failover&ttl=10s
	// dlm: invalid argument: config: strategy: cluster:// runs single or failover (strategy=failover), got "redlock"
}
