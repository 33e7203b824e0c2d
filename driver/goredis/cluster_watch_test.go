package goredis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

// On a Cluster, Watch subscribes each channel on the master of its slot
// (before the fix, the dispatcher's first read could connect the PubSub to
// a random node first, and 1 Watch in ~60 was never confirmed), and a
// shard message published there reaches it.
func TestClusterWatchOnTheSlotsMaster(t *testing.T) {
	t.Parallel() // owns its servers
	cl := redistest.StartClusterReplicas(t, 1, 1, 1)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr}})
	defer cc.Close()
	n := New(cc)
	ctx := context.Background()
	for i := range 120 {
		ch := fmt.Sprint("dlm:{watched-", i, "}")
		got := make(chan string, 1)
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // generous: a Watch never confirmed fails here, a loaded machine does not
		stop, err := n.Watch(wctx, ch, func(p string) { got <- p })
		cancel()
		if err != nil {
			t.Errorf("%d %s slot %d after %v: %v", i, ch, eval.Slot(ch), time.Since(start), err)
			continue
		}
		if err := cc.SPublish(ctx, ch, "x").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(30 * time.Second): // only a lost message waits this long
			t.Errorf("%d: no message", i)
		}
		stop()
	}
}
