package nodekit

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Receiver is how a client subscribes one channel with a call that
// blocks while it delivers (rueidis' and valkey-go's Receive), for
// NewReceiverHub.
type Receiver struct {
	// Receive subscribes channel (with SSUBSCRIBE when sharded), calls
	// confirmed on each confirmation of it and message for each message,
	// and returns once the subscription ended: when ctx ended, after
	// unsubscribing on its connection.
	Receive func(ctx context.Context, channel string, sharded bool, confirmed func(), message func(payload string)) error
	// Final reports whether an error of Receive ends the subscription for
	// good (an error reply, a closed client). After any other (a broken
	// connection, a server that unsubscribed) the channel is subscribed
	// again.
	Final func(err error) bool
	// Sharded: subscribe with SSUBSCRIBE (on a Cluster, release scripts
	// publish on shard channels). A server that replies "unknown command"
	// (before 7.0) is then sent SUBSCRIBE, and so is every
	// later subscription: the release script publishes ordinary messages.
	Sharded bool
}

// NewReceiverHub returns a Hub over r: one goroutine per subscribed
// channel, which keeps it subscribed (again after the connection broke)
// until the Hub unsubscribes it. A channel subscribed again after it was
// unsubscribed is subscribed once the previous subscription ended.
func NewReceiverHub(r Receiver) *Hub {
	s := &receiver{r: r, last: map[string]*receiving{}}
	s.noShards.Store(!r.Sharded)
	return NewHub(func(_ context.Context, ev Events) (PubSub, error) { return session{s, ev}, nil })
}

type receiver struct {
	r        Receiver
	noShards atomic.Bool // SUBSCRIBE, not SSUBSCRIBE
	mu       sync.Mutex
	last     map[string]*receiving // each channel's latest subscription, until it ends
}

// A receiving is one subscription of a channel, run by one goroutine.
type receiving struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once it has unsubscribed
}

// A session is the PubSub of a receiver's Hub. Its methods never wait for
// the client, whose reader may be waiting in an event for the Hub's lock.
type session struct {
	s  *receiver
	ev Events
}

func (s session) Subscribe(_ context.Context, channels ...string) error {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	for _, ch := range channels {
		ctx, cancel := context.WithCancel(context.Background())
		rc := &receiving{cancel: cancel, done: make(chan struct{})}
		go s.s.receive(ctx, ch, s.ev, s.s.last[ch], rc)
		s.s.last[ch] = rc
	}
	return nil
}

// Unsubscribe stops the channels' latest subscriptions (the Hub's own).
func (s session) Unsubscribe(_ context.Context, channels ...string) error {
	s.s.mu.Lock()
	defer s.s.mu.Unlock()
	for _, ch := range channels {
		if rc := s.s.last[ch]; rc != nil {
			rc.cancel()
		}
	}
	return nil
}

// Close does nothing: the Hub closes a session only once it is unused.
func (s session) Close() error { return nil }

// receive keeps ch subscribed until ctx ends. It subscribes once prev, the
// channel's previous subscription, ended, and answers its Subscribe with
// one event: Subscribed, or Refused (also when stopped before the
// confirmation, for the Hub's count).
func (s *receiver) receive(ctx context.Context, ch string, ev Events, prev, rc *receiving) {
	var answered atomic.Bool // one event per Subscribe, not per reconnection
	answer := func(err error) {
		switch {
		case !answered.CompareAndSwap(false, true):
		case err != nil:
			ev.Refused(ch, err)
		default:
			ev.Subscribed(ch)
		}
	}
	defer func() {
		answer(context.Canceled)
		s.mu.Lock()
		if s.last[ch] == rc {
			delete(s.last, ch)
		}
		s.mu.Unlock()
		close(rc.done)
	}()
	if prev != nil {
		select {
		case <-prev.done:
		case <-ctx.Done():
			return
		}
	}
	for {
		sharded := !s.noShards.Load()
		err := s.r.Receive(ctx, ch, sharded, func() {
			if ctx.Err() == nil {
				answer(nil)
			}
		}, func(p string) { ev.Message(ch, p) })
		final := ctx.Err() == nil && err != nil && s.r.Final(err)
		if final && sharded && strings.Contains(err.Error(), "unknown command") {
			s.noShards.Store(true)
			continue
		}
		if final {
			answer(err)
			return
		}
		select { // the connection broke and the client did not subscribe again, or the server unsubscribed
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}
