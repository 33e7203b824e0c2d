package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/election"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	srv := dlmtest.NewServer() // an in-process Redis for the example
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)

	single, _ := strategy.NewSingle(node)
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
	// dlm: election "scheduler": election has no leader
}
