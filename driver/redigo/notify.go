package redigo

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
)

var _ dlm.Notifier = (*Node)(nil)

const (
	// hubLinger is how long the subscription connection stays open after
	// its last channel was unsubscribed, so that bursts of waiting reuse it.
	hubLinger = time.Second
	// hubPing is how often the subscription connection is pinged; a
	// connection that stays silent for three pings is closed.
	hubPing = 5 * time.Second
)

// Watch implements dlm.Notifier. All channels of a Node share one
// subscription connection, dialled with the pool's DialContext (or Dial)
// outside the pool's accounting, opened on the first Watch and closed a
// second after the last subscription ends. It is pinged every 5s and closed
// when the server stops answering.
//
// A broken subscription connection is not re-established: its
// subscriptions end silently (notify is not called again, and their stop
// functions do nothing), and the next Watch dials a new connection. Callers
// must not rely on messages (see dlm.Notifier); dlm's Manager also polls.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.hub.watch(ctx, channel, notify)
}

// hub multiplexes the Watch calls of one Node onto one subscription
// connection.
type hub struct {
	pool *redis.Pool

	mu   sync.Mutex
	conn *subConn // nil while none is open
}

// subConn is one subscription connection and what was subscribed on it.
type subConn struct {
	c    redis.Conn // written under hub.mu, read by the reader goroutine
	subs map[string]*subscription
	// pending counts, per channel, SUBSCRIBE commands sent whose
	// confirmation has not been read: a subscription is confirmed by the
	// reply to its own SUBSCRIBE, not to an earlier one of the channel.
	pending map[string]int
	nextID  int
	idle    *time.Timer
	broken  bool
	done    chan struct{} // closed when the reader has exited
}

type subscription struct {
	handlers  map[int]func(string)
	ok        bool          // confirmed is closed
	confirmed chan struct{} // closed once the server confirmed the SUBSCRIBE
}

func (h *hub) dial(ctx context.Context) (redis.Conn, error) {
	if h.pool.DialContext != nil {
		return h.pool.DialContext(ctx)
	}
	if h.pool.Dial != nil {
		return h.pool.Dial()
	}
	return nil, errors.New("redigo: the pool has neither DialContext nor Dial")
}

func (h *hub) watch(ctx context.Context, channel string, notify func(string)) (func(), error) {
	h.mu.Lock()
	sc := h.conn
	if sc == nil {
		c, err := h.dial(ctx)
		if err != nil {
			h.mu.Unlock()
			return nil, err
		}
		sc = &subConn{c: c, subs: map[string]*subscription{}, pending: map[string]int{}, done: make(chan struct{})}
		h.conn = sc
		go h.read(sc)
		go h.ping(sc)
	}
	if sc.idle != nil {
		sc.idle.Stop()
		sc.idle = nil
	}
	s := sc.subs[channel]
	var err error
	if s == nil {
		s = &subscription{handlers: map[int]func(string){}, confirmed: make(chan struct{})}
		sc.subs[channel] = s
		sc.pending[channel]++
		err = sc.c.Send("SUBSCRIBE", channel)
		if err == nil {
			err = sc.c.Flush()
		}
	}
	id := sc.nextID
	sc.nextID++
	s.handlers[id] = notify
	h.mu.Unlock()
	var once sync.Once
	stop := func() { once.Do(func() { h.remove(sc, channel, id) }) }
	if err != nil {
		stop()
		h.fail(sc)
		return nil, err
	}
	select {
	case <-s.confirmed:
		return stop, nil
	case <-sc.done:
		stop()
		return nil, errors.New("redigo: the subscription connection broke before the server confirmed the subscription")
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// remove ends one Watch; the channel is unsubscribed when it was the last on
// it, and the connection closed hubLinger after its last channel.
func (h *hub) remove(sc *subConn, channel string, id int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := sc.subs[channel]
	if s == nil {
		return
	}
	delete(s.handlers, id)
	if len(s.handlers) > 0 {
		return
	}
	delete(sc.subs, channel)
	if sc.broken {
		return
	}
	if sc.c.Send("UNSUBSCRIBE", channel) != nil || sc.c.Flush() != nil {
		h.failLocked(sc)
		return
	}
	if len(sc.subs) == 0 && sc.idle == nil {
		sc.idle = time.AfterFunc(hubLinger, func() {
			h.mu.Lock()
			if len(sc.subs) == 0 && sc.idle != nil {
				h.failLocked(sc)
			}
			h.mu.Unlock()
		})
	}
}

// fail closes sc and forgets it, so that the next Watch dials anew.
func (h *hub) fail(sc *subConn) {
	h.mu.Lock()
	h.failLocked(sc)
	h.mu.Unlock()
}

func (h *hub) failLocked(sc *subConn) {
	if sc.broken {
		return
	}
	sc.broken = true
	if sc.idle != nil {
		sc.idle.Stop()
		sc.idle = nil
	}
	if h.conn == sc {
		h.conn = nil
	}
	_ = sc.c.Close() // ends the reader's Receive
}

// read delivers messages and confirmations until the connection fails.
func (h *hub) read(sc *subConn) {
	defer close(sc.done)
	defer h.fail(sc)
	ps := redis.PubSubConn{Conn: sc.c}
	_, timeouts := sc.c.(redis.ConnWithTimeout)
	var buf []func(string)
	for {
		var msg any
		if timeouts {
			// Pongs arrive every hubPing; three missed ones end the connection.
			msg = ps.ReceiveWithTimeout(3 * hubPing)
		} else {
			msg = ps.Receive() // within the connection's own read timeout
		}
		switch m := msg.(type) {
		case error:
			return
		case redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			if sc.pending[m.Channel]--; sc.pending[m.Channel] <= 0 {
				delete(sc.pending, m.Channel)
				if s := sc.subs[m.Channel]; s != nil && !s.ok {
					s.ok = true
					close(s.confirmed)
				}
			}
			h.mu.Unlock()
		case redis.Message:
			h.mu.Lock()
			buf = buf[:0]
			if s := sc.subs[m.Channel]; s != nil && s.ok {
				for _, f := range s.handlers {
					buf = append(buf, f)
				}
			}
			h.mu.Unlock()
			for _, f := range buf {
				f(string(m.Data))
			}
		}
	}
}

// ping keeps the connection's liveness known while it is open.
func (h *hub) ping(sc *subConn) {
	t := time.NewTicker(hubPing)
	defer t.Stop()
	for {
		select {
		case <-sc.done:
			return
		case <-t.C:
			h.mu.Lock()
			if !sc.broken && (sc.c.Send("PING") != nil || sc.c.Flush() != nil) {
				h.failLocked(sc)
			}
			h.mu.Unlock()
		}
	}
}
