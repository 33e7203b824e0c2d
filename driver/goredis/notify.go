package goredis

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
)

var _ dlm.Notifier = (*Node)(nil)

// hubLinger is how long the subscription connection stays open after its
// last channel was unsubscribed, so that bursts of waiting reuse it.
const hubLinger = time.Second

// Watch implements dlm.Notifier. All channels of a Node share one dedicated
// pub/sub connection, opened on the first Watch and closed a second after
// the last subscription ends. go-redis re-establishes a broken connection
// and its subscriptions; messages published in between are lost.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	n.hubMu.Lock()
	h := n.hub
	if h == nil {
		h = newHub(n.c)
		n.hub = h
	}
	n.hubMu.Unlock()
	return h.watch(ctx, channel, notify)
}

type hub struct {
	c redis.UniversalClient

	mu     sync.Mutex
	ps     *redis.PubSub // nil while closed
	done   chan struct{} // closed when the dispatcher of ps has exited
	subs   map[string]*subscription
	nextID int
	idle   *time.Timer
}

type subscription struct {
	handlers  map[int]func(string)
	confirmed chan struct{}
	ok        bool // confirmed is closed
}

func newHub(c redis.UniversalClient) *hub { return &hub{c: c, subs: map[string]*subscription{}} }

func (h *hub) watch(ctx context.Context, channel string, notify func(string)) (func(), error) {
	h.mu.Lock()
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.ps == nil {
		h.ps = h.c.Subscribe(context.WithoutCancel(ctx))
		h.done = make(chan struct{})
		go h.dispatch(h.ps, h.done)
	}
	s := h.subs[channel]
	first := s == nil
	if first {
		s = &subscription{handlers: map[int]func(string){}, confirmed: make(chan struct{})}
		h.subs[channel] = s
	}
	id := h.nextID
	h.nextID++
	s.handlers[id] = notify
	var err error
	if first {
		err = h.ps.Subscribe(ctx, channel)
	}
	h.mu.Unlock()
	var once sync.Once
	stop := func() { once.Do(func() { h.remove(channel, id) }) }
	if err != nil {
		stop()
		return nil, err
	}
	select {
	case <-s.confirmed:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

func (h *hub) remove(channel string, id int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[channel]
	if s == nil {
		return
	}
	delete(s.handlers, id)
	if len(s.handlers) > 0 {
		return
	}
	delete(h.subs, channel)
	if h.ps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = h.ps.Unsubscribe(ctx, channel)
	cancel()
	if len(h.subs) == 0 && h.idle == nil {
		ps := h.ps
		h.idle = time.AfterFunc(hubLinger, func() { h.closeIdle(ps) })
	}
}

// closeIdle closes ps if it is still the hub's connection and unused.
func (h *hub) closeIdle(ps *redis.PubSub) {
	h.mu.Lock()
	if h.ps != ps || len(h.subs) > 0 {
		h.mu.Unlock()
		return
	}
	h.ps, h.idle = nil, nil
	done := h.done
	h.mu.Unlock()
	_ = ps.Close()
	<-done
}

// dispatch delivers messages and subscription confirmations until ps closes.
func (h *hub) dispatch(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	var buf []func(string)
	for m := range ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)) {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			if s := h.subs[m.Channel]; s != nil && !s.ok {
				s.ok = true
				close(s.confirmed)
			}
			h.mu.Unlock()
		case *redis.Message:
			h.mu.Lock()
			buf = buf[:0]
			if s := h.subs[m.Channel]; s != nil {
				for _, f := range s.handlers {
					buf = append(buf, f)
				}
			}
			h.mu.Unlock()
			for _, f := range buf {
				f(m.Payload)
			}
		}
	}
}
