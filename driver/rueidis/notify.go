package rueidis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
)

var _ dlm.Notifier = (*Node)(nil)

// Watch implements dlm.Notifier with rueidis' Receive: one SUBSCRIBE per
// channel and Node, however many Watch calls share the channel, on the
// connection rueidis uses for pub/sub (on a standalone or Sentinel client
// with RESP3, one of its shared connections). Watch returns once the
// server confirmed the SUBSCRIBE (rueidis.WithOnSubscriptionHook). When
// the last watcher of a channel stops, the Node sends UNSUBSCRIBE on the
// same connection.
//
// When the connection breaks, rueidis (or, with DisableRetry, the Node)
// subscribes again on a new one; messages published in between are lost.
// While the server cannot be reached, Watch keeps trying and returns when
// the subscription is confirmed or ctx ends; it fails at once on an error
// reply (a server that refuses SUBSCRIBE) or a closed client.
// A Node assumes it is the only subscriber of its channels on its client:
// an UNSUBSCRIBE of the same channel sent through the same client by other
// code would end the Node's subscription too until it subscribes again.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	n.hub.once.Do(func() {
		n.hub.c = n.c
		n.hub.subs = map[string]*chanSub{}
		n.hub.ending = map[string]chan struct{}{}
	})
	return n.hub.watch(ctx, channel, notify)
}

// resubscribeBackoff bounds how often a subscription whose Receive ended
// on its own is tried again.
const resubscribeBackoff = 100 * time.Millisecond

// A hub holds a Node's subscriptions.
type hub struct {
	once sync.Once
	c    rueidis.Client

	mu     sync.Mutex
	subs   map[string]*chanSub
	ending map[string]chan struct{} // channel → done of its ending chanSub
	nextID int
}

// A chanSub is the subscription of one channel, run by one goroutine.
type chanSub struct {
	handlers  map[int]func(string) // guarded by hub.mu
	confirmed chan struct{}
	confirm   sync.Once
	cancel    context.CancelFunc
	done      chan struct{} // closed when the goroutine has exited
	err       error         // why it exited on its own; read after done
}

func (h *hub) watch(ctx context.Context, channel string, notify func(string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	for {
		// An ending subscription of this channel unsubscribes first, so
		// that its UNSUBSCRIBE cannot end the new one.
		d := h.ending[channel]
		if d == nil {
			break
		}
		h.mu.Unlock()
		select {
		case <-d:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		h.mu.Lock()
	}
	s := h.subs[channel]
	if s == nil {
		rctx, cancel := context.WithCancel(context.Background())
		s = &chanSub{handlers: map[int]func(string){}, confirmed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
		h.subs[channel] = s
		go h.run(rctx, channel, s)
	}
	id := h.nextID
	h.nextID++
	s.handlers[id] = notify
	h.mu.Unlock()

	var once sync.Once
	stop := func() { once.Do(func() { h.remove(channel, s, id) }) }
	select {
	case <-s.confirmed:
		return stop, nil
	case <-s.done:
		stop()
		err := s.err
		if err == nil {
			err = errors.New("subscription ended")
		}
		return nil, fmt.Errorf("dlm: rueidis: SUBSCRIBE %s: %w", channel, err)
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

func (h *hub) remove(channel string, s *chanSub, id int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(s.handlers, id)
	if len(s.handlers) > 0 || h.subs[channel] != s {
		return
	}
	delete(h.subs, channel)
	select {
	case <-s.done:
		return
	default:
	}
	h.ending[channel] = s.done
	s.cancel()
}

// run keeps channel subscribed until s is cancelled, and then unsubscribes.
func (h *hub) run(ctx context.Context, channel string, s *chanSub) {
	defer func() {
		h.mu.Lock()
		if h.ending[channel] == s.done {
			delete(h.ending, channel)
		}
		if h.subs[channel] == s { // ended on its own: the next Watch starts afresh
			delete(h.subs, channel)
		}
		h.mu.Unlock()
		close(s.done)
	}()
	rctx := rueidis.WithOnSubscriptionHook(ctx, func(p rueidis.PubSubSubscription) {
		if p.Kind == "subscribe" && p.Channel == channel {
			s.confirm.Do(func() { close(s.confirmed) })
		}
	})
	rctx = rueidis.WithOnReceiveReturnHook(rctx, func(err error, c rueidis.CommandClient) error {
		if ctx.Err() != nil { // stopped: leave the channel on this connection
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Do(uctx, c.B().Unsubscribe().Channel(channel).Build()).Error()
			cancel()
		}
		return err
	})
	deliver := func(m rueidis.PubSubMessage) {
		h.mu.Lock()
		fs := make([]func(string), 0, len(s.handlers))
		for _, f := range s.handlers {
			fs = append(fs, f)
		}
		h.mu.Unlock()
		for _, f := range fs {
			f(m.Message)
		}
	}
	for {
		err := h.c.Receive(rctx, h.c.B().Subscribe().Channel(channel).Build(), deliver)
		if ctx.Err() != nil {
			return
		}
		var re *rueidis.RedisError
		if errors.Is(err, rueidis.ErrClosing) || errors.As(err, &re) {
			s.err = err
			return
		}
		// The connection broke (and rueidis did not subscribe again) or the
		// server unsubscribed: subscribe again.
		select {
		case <-time.After(resubscribeBackoff):
		case <-ctx.Done():
			return
		}
	}
}
