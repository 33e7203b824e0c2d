package goredis

// Watch's connections on a Cluster: one per hash slot, SSUBSCRIBEd on the
// slot's master, that follow the slot when it moves.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/nodekit"
)

// slotHub returns the Hub of channel's hash slot on a Cluster, whose
// connection SSUBSCRIBEs on the master that serves the slot: release
// scripts publish on shard channels there (strategy's release.lua), so
// that a message stays in its shard.
func (n *node) slotHub(cc *redis.ClusterClient, channel string) *nodekit.Hub {
	slot := eval.Slot(channel)
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.slots[slot]
	if h == nil {
		if n.slots == nil {
			n.slots = map[int]*nodekit.Hub{}
		}
		h = nodekit.NewHub(func(ctx context.Context, ev nodekit.Events) (nodekit.PubSub, error) {
			return openShardPubSub(ctx, cc, ev), nil
		})
		n.slots[slot] = h
	}
	return h
}

// A shardPubSub is a redis.PubSub on shard channels, all of one hash slot.
type shardPubSub struct {
	cc    *redis.ClusterClient
	ps    *redis.PubSub
	ev    nodekit.Events
	start sync.Once
	done  chan struct{} // closed by Close

	mu      sync.Mutex
	leaving map[string]int // SUNSUBSCRIBEs sent and not yet confirmed, per channel
}

// Subscribe sends SSUBSCRIBE, and starts the dispatcher after the first:
// go-redis connects a PubSub on the first command, on the master of its
// channels' slot, or on a random node when the dispatcher's read comes
// first.
func (s *shardPubSub) Subscribe(ctx context.Context, channels ...string) error {
	err := s.ps.SSubscribe(ctx, channels...)
	s.start.Do(s.dispatch)
	return err
}

func (s *shardPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	for _, ch := range channels {
		s.leaving[ch]++
	}
	s.mu.Unlock()
	return s.ps.SUnsubscribe(ctx, channels...)
}

func (s *shardPubSub) Close() error {
	close(s.done)
	return s.ps.Close()
}

// slotMoveReload is how long a Hub waits after its slot moved before it
// subscribes again: the time go-redis takes to reload its slot map.
const slotMoveReload = 100 * time.Millisecond

// shardPing is how often a shard channel connection is checked. A
// redis.PubSub dials again by itself when its connection breaks, but on
// the master its client's slot map names, which after a failover stays
// the dead one until something reloads the map: a failed check reloads
// it. TestClusterWaiterFollowsFailover: subscribed again 17s after the
// master's kill without the check, 5.5s with it.
const shardPing = time.Second

// openShardPubSub opens a Hub's connection on a Cluster. Its dispatcher
// reports confirmations and messages. A server unsubscribes shard channels
// by itself when their slot moves to another master; the dispatcher then
// reloads the client's slot map and reports the connection broken, so that
// the Hub subscribes again on a new one, on the slot's new master.
func openShardPubSub(ctx context.Context, cc *redis.ClusterClient, ev nodekit.Events) *shardPubSub {
	return &shardPubSub{cc: cc, ps: cc.SSubscribe(ctx), ev: ev, leaving: map[string]int{}, done: make(chan struct{})}
}

func (s *shardPubSub) dispatch() {
	go func() {
		t := time.NewTicker(shardPing)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), shardPing)
				if err := s.ps.Ping(ctx); err != nil {
					s.cc.ReloadState(context.Background())
				}
				cancel()
			}
		}
	}()
	ch := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go func() {
		for m := range ch {
			switch m := m.(type) {
			case *redis.Subscription:
				switch m.Kind {
				case "ssubscribe":
					s.ev.Subscribed(m.Channel)
				case "sunsubscribe":
					s.mu.Lock()
					ours := s.leaving[m.Channel] > 0
					if ours {
						s.leaving[m.Channel]--
					}
					s.mu.Unlock()
					if !ours {
						// go-redis reloads the slot map in the background:
						// give it a moment before the Hub dials the new master.
						s.cc.ReloadState(context.Background())
						go func(ch string) {
							time.Sleep(slotMoveReload)
							s.ev.Broken(fmt.Errorf("dlm: the server unsubscribed %q: its slot moved", ch))
						}(m.Channel)
					}
				}
			case *redis.Message:
				s.ev.Message(m.Channel, m.Payload)
			}
		}
	}()
}
