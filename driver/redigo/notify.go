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
	// After a subscription connection broke, a new one is dialled after
	// hubRedialMin, then at intervals doubling up to hubRedialMax.
	hubRedialMin = 20 * time.Millisecond
	hubRedialMax = 2 * time.Second
)

// Watch implements dlm.Notifier. All channels of a Node share one
// subscription connection, dialled with the pool's DialContext (or Dial)
// outside the pool's accounting, opened on the first Watch and closed a
// second after the last subscription ends. It is pinged every 5s and closed
// when the server stops answering.
//
// When the subscription connection breaks while channels are watched, a new
// one is dialled (after 20ms, then backing off to every 2s) and every
// channel subscribed again on it. Messages published in between are lost.
// A Watch that has not returned yet when the connection breaks fails.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.hub.watch(ctx, channel, notify)
}

// hub multiplexes the Watch calls of one Node onto one subscription
// connection, and re-establishes it with its channels when it breaks.
type hub struct {
	pool *redis.Pool

	mu        sync.Mutex
	subs      map[string]*subscription // by channel; they outlive a connection
	nextID    int
	conn      *subConn    // nil while none is open
	idle      *time.Timer // closes conn hubLinger after its last channel ended
	redialing bool        // a goroutine is dialling a connection for subs
}

// subConn is one subscription connection.
type subConn struct {
	c redis.Conn // written under hub.mu, read by the reader goroutine
	// pending counts, per channel, SUBSCRIBE commands sent whose
	// confirmation has not been read: a subscription is confirmed by the
	// reply to its own SUBSCRIBE, not to an earlier one of the channel.
	pending map[string]int
	broken  bool
	done    chan struct{} // closed when the reader has exited
}

type subscription struct {
	handlers map[int]func(string)
	// ok reports that the server confirmed the channel on the current
	// connection, and closes confirmed; both are renewed when it breaks.
	ok        bool
	confirmed chan struct{}
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
	if h.conn == nil {
		h.mu.Unlock()
		c, err := h.dial(ctx) // outside the lock: messages and stops go on meanwhile
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		if h.conn != nil {
			_ = c.Close() // another Watch or the redialler was faster
		} else if err := h.openLocked(c); err != nil {
			h.mu.Unlock()
			return nil, err
		}
	}
	sc := h.conn
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.subs == nil {
		h.subs = map[string]*subscription{}
	}
	s := h.subs[channel]
	var err error
	if s == nil {
		s = &subscription{handlers: map[int]func(string){}, confirmed: make(chan struct{})}
		h.subs[channel] = s
		err = sc.subscribe(channel)
	}
	id := h.nextID
	h.nextID++
	s.handlers[id] = notify
	confirmed := s.confirmed
	h.mu.Unlock()
	var once sync.Once
	stop := func() { once.Do(func() { h.remove(channel, id) }) }
	if err != nil {
		stop()
		h.fail(sc)
		return nil, err
	}
	select {
	case <-confirmed:
		return stop, nil
	case <-sc.done:
		stop()
		return nil, errors.New("redigo: the subscription connection broke before the server confirmed the subscription")
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// openLocked makes c the subscription connection and subscribes every
// watched channel on it.
func (h *hub) openLocked(c redis.Conn) error {
	sc := &subConn{c: c, pending: map[string]int{}, done: make(chan struct{})}
	h.conn = sc
	go h.read(sc)
	go h.ping(sc)
	for ch := range h.subs {
		sc.pending[ch]++
		if err := sc.c.Send("SUBSCRIBE", ch); err != nil {
			h.failLocked(sc)
			return err
		}
	}
	if len(h.subs) > 0 {
		if err := sc.c.Flush(); err != nil {
			h.failLocked(sc)
			return err
		}
	}
	return nil
}

func (sc *subConn) subscribe(channel string) error {
	sc.pending[channel]++
	if err := sc.c.Send("SUBSCRIBE", channel); err != nil {
		return err
	}
	return sc.c.Flush()
}

// remove ends one Watch; the channel is unsubscribed when it was the last on
// it, and the connection closed hubLinger after its last channel.
func (h *hub) remove(channel string, id int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[channel]
	if s == nil {
		return
	}
	if _, ok := s.handlers[id]; !ok {
		return // the channel ended and was watched anew since
	}
	delete(s.handlers, id)
	if len(s.handlers) > 0 {
		return
	}
	delete(h.subs, channel)
	sc := h.conn
	if sc == nil {
		return // no connection to unsubscribe on
	}
	if sc.c.Send("UNSUBSCRIBE", channel) != nil || sc.c.Flush() != nil {
		h.failLocked(sc)
		return
	}
	if len(h.subs) == 0 && h.idle == nil {
		h.idle = time.AfterFunc(hubLinger, func() {
			h.mu.Lock()
			if len(h.subs) == 0 && h.conn == sc && h.idle != nil {
				h.idle = nil
				h.failLocked(sc)
			}
			h.mu.Unlock()
		})
	}
}

// fail closes sc; see failLocked.
func (h *hub) fail(sc *subConn) {
	h.mu.Lock()
	h.failLocked(sc)
	h.mu.Unlock()
}

// failLocked closes sc and forgets it: the next Watch dials anew, and
// channels still watched are subscribed again on a connection the
// redialler opens.
func (h *hub) failLocked(sc *subConn) {
	if sc.broken {
		return
	}
	sc.broken = true
	_ = sc.c.Close() // ends the reader's Receive
	if h.conn != sc {
		return
	}
	h.conn = nil
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	for _, s := range h.subs {
		if s.ok {
			s.ok = false
			s.confirmed = make(chan struct{})
		}
	}
	if len(h.subs) > 0 && !h.redialing {
		h.redialing = true
		go h.redial()
	}
}

// redial opens a new subscription connection for the channels still
// watched, backing off while dialling fails; it ends once one is open or
// nothing is watched.
func (h *hub) redial() {
	for delay := hubRedialMin; ; delay = min(2*delay, hubRedialMax) {
		time.Sleep(delay)
		h.mu.Lock()
		if len(h.subs) == 0 || h.conn != nil {
			h.redialing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), hubPing)
		c, err := h.dial(ctx)
		cancel()
		if err != nil {
			continue
		}
		h.mu.Lock()
		if len(h.subs) == 0 || h.conn != nil {
			_ = c.Close()
		} else {
			_ = h.openLocked(c) // on failure the loop goes on
		}
		h.mu.Unlock()
	}
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
				if s := h.subs[m.Channel]; s != nil && !s.ok && h.conn == sc {
					s.ok = true
					close(s.confirmed)
				}
			}
			h.mu.Unlock()
		case redis.Message:
			h.mu.Lock()
			buf = buf[:0]
			if s := h.subs[m.Channel]; s != nil && s.ok && h.conn == sc {
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
