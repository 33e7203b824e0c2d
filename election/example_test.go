package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/election"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv, err := miniredis.Run() // an in-process Redis; use your own client
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()

	single, _ := strategy.NewSingle(goredis.New(client))
	// Leaders renew their lease until they resign or die.
	m, _ := dlm.New(single, dlm.WithTTL(5*time.Second), dlm.WithAutoRenew(0.5, 24*time.Hour))
	e, err := election.New(m, "scheduler")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lead, err := e.Campaign(ctx, "host-a:8080") // waits until this process leads
	if err != nil {
		panic(err)
	}
	leader, _ := e.Leader(ctx) // what every process sees
	fmt.Println(leader.Value, leader.Term == lead.Term())
	// Lead while lead.Context() lasts, passing lead.Term() with each write.
	_ = lead.Resign(ctx)
	_, err = e.Leader(ctx)
	fmt.Println(err)
	// Output:
	// host-a:8080 true
	// election "scheduler": dlm: election has no leader
}
