package nodekit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A PubSub is a driver's dedicated pub/sub connection: the primitive a Hub
// builds driver.Node.Watch on. One Hub calls its methods one at a time, in the
// order the subscriptions change, and never while it holds the lock that
// its Events take: a driver may report events from inside Subscribe (a
// confirmation read while it waited) and may wait there for replies, bounded
// by ctx.
type PubSub interface {
	// Subscribe asks the server to subscribe to channels, and returns once
	// the request is sent (or ctx ended). The driver reports each channel's
	// confirmation with Events.Subscribed, during or after the call.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe asks the server to end the subscriptions to channels.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Close closes the connection. The driver may still call Events
	// functions afterwards; the Hub ignores them.
	Close() error
}

// Events is how a driver reports what arrives on a PubSub's connection.
type Events struct {
	// Message delivers a message published on channel.
	Message func(channel, payload string)
	// Subscribed confirms a subscription to channel. It is reported once
	// per channel of each Subscribe, as Redis replies to SUBSCRIBE.
	Subscribed func(channel string)
	// Refused reports, instead of Subscribed, that a subscription to
	// channel cannot be made (the server replied to SUBSCRIBE with an
	// error, or the client is closed): the Watch calls waiting for its
	// confirmation fail with err.
	Refused func(channel string, err error)
	// Broken reports that the connection failed and that the driver will not
	// re-establish it. The Hub then opens a new one and subscribes to its
	// channels again. A driver whose client re-establishes connections and
	// subscriptions by itself never calls it.
	Broken func(err error)
}

// HubLinger is how long a Hub keeps its connection open after the last
// subscription ended, so that bursts of waiting reuse it.
const HubLinger = time.Second

// Hub multiplexes the Watch calls of one Node onto one pub/sub connection,
// opened on the first Watch and closed HubLinger after the last subscription
// ends. It is safe for concurrent use. A Watch waits for another's connect
// or Subscribe only until its own context ends. The zero Hub is not usable;
// see NewHub.
type Hub struct {
	open func(ctx context.Context, ev Events) (PubSub, error)
	// turn holds a token while a caller opens the connection or calls its
	// methods, so that they run one at a time and in order; it is taken
	// before mu, never while mu is held.
	turn chan struct{}

	mu   sync.Mutex
	conn *hubConn // nil while closed
	subs map[string]*hubSub
	// owed holds the channels whose last Watch ended and that are not yet
	// unsubscribed: a later Subscribe of one must follow its Unsubscribe.
	owed   map[string]bool
	nextID int
	idle   *time.Timer
}

type hubConn struct {
	ps PubSub
	// pending counts, per channel, the subscriptions asked for and not yet
	// confirmed: a channel unsubscribed and subscribed again must be
	// confirmed by the reply to the last SUBSCRIBE, not to an earlier one.
	pending map[string]int
	broken  bool // the driver reported it broken
}

type hubSub struct {
	handlers  map[int]func(string)
	confirmed chan struct{}
	ok        bool  // confirmed is closed
	err       error // why it was refused; set before confirmed is closed
}

// NewHub returns a Hub that opens its connection with open. open returns
// once the connection is usable, and reports through ev until Close; its
// ctx, the first Watch's, bounds the connect, not the connection's life.
func NewHub(open func(ctx context.Context, ev Events) (PubSub, error)) *Hub {
	return &Hub{open: open, turn: make(chan struct{}, 1), subs: map[string]*hubSub{}, owed: map[string]bool{}}
}

// take takes the Hub's turn, or returns ctx's error when ctx ends first.
func (h *Hub) take(ctx context.Context) error {
	select {
	case h.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Hub) done() { <-h.turn }

// Watch implements driver.Node.Watch.
func (h *Hub) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err // neither dial nor subscribe for a call already over
	}
	if err := h.take(ctx); err != nil {
		return nil, err
	}
	// Holding the turn, only this call connects; the connection may still
	// close (broken, or idle) until the subscription is registered.
	var c *hubConn
	for {
		h.mu.Lock()
		if h.idle != nil {
			h.idle.Stop()
			h.idle = nil
		}
		if c = h.conn; c != nil {
			break
		}
		h.mu.Unlock()
		if _, err := h.connect(ctx); err != nil {
			h.done()
			return nil, err
		}
	}
	s := h.subs[channel]
	first := s == nil
	owed := false
	if first {
		s = &hubSub{handlers: map[int]func(string){}, confirmed: make(chan struct{})}
		h.subs[channel] = s
		c.pending[channel]++
		owed = h.owed[channel]
		delete(h.owed, channel)
	}
	id := h.nextID
	h.nextID++
	s.handlers[id] = notify
	h.mu.Unlock()
	var err error
	if owed {
		_ = c.ps.Unsubscribe(ctx, channel)
	}
	if first {
		err = c.ps.Subscribe(ctx, channel)
	}
	h.done()
	var once sync.Once
	stop := func() { once.Do(func() { h.remove(channel, id) }) }
	if err != nil {
		stop()
		return nil, err
	}
	select {
	case <-s.confirmed:
		if s.err != nil {
			stop()
			return nil, s.err
		}
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// connect opens a connection whose events reach the Hub for as long as it
// is the Hub's, makes it the Hub's, and subscribes on it to every channel
// watched. The caller holds the turn, and the Hub has no connection.
func (h *Hub) connect(ctx context.Context) (*hubConn, error) {
	c := &hubConn{pending: map[string]int{}}
	ps, err := h.open(ctx, Events{
		Message:    func(ch, payload string) { h.message(c, ch, payload) },
		Subscribed: func(ch string) { h.answered(c, ch, nil) },
		Refused:    func(ch string, err error) { h.answered(c, ch, err) },
		Broken:     func(error) { h.broken(c) },
	})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if c.broken {
		h.mu.Unlock()
		_ = ps.Close()
		return nil, errors.New("dlm: the pub/sub connection broke as it opened")
	}
	c.ps = ps
	h.conn = c
	chans := make([]string, 0, len(h.subs))
	for ch := range h.subs {
		chans = append(chans, ch)
		c.pending[ch]++
	}
	h.mu.Unlock()
	if len(chans) > 0 {
		if err := ps.Subscribe(ctx, chans...); err != nil {
			h.mu.Lock()
			if h.conn == c {
				h.conn = nil
			}
			h.mu.Unlock()
			_ = ps.Close()
			return nil, err
		}
	}
	return c, nil
}

// remove ends a Watch. The channel's last Watch has it unsubscribed in the
// background, in its turn, or by the next Watch of it, whichever comes
// first.
func (h *Hub) remove(channel string, id int) {
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
	h.owed[channel] = true
	go h.unsubscribe(channel)
	if h.conn != nil && len(h.subs) == 0 && h.idle == nil {
		c := h.conn
		h.idle = time.AfterFunc(HubLinger, func() { h.closeIdle(c) })
	}
}

// unsubscribe unsubscribes channel if that is still owed.
func (h *Hub) unsubscribe(channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h.take(ctx) != nil {
		return // still owed: the channel's next Watch unsubscribes it first
	}
	defer h.done()
	h.mu.Lock()
	c := h.conn
	owed := h.owed[channel] && c != nil
	if owed {
		delete(h.owed, channel)
	}
	h.mu.Unlock()
	if owed {
		_ = c.ps.Unsubscribe(ctx, channel)
	}
}

// closeIdle closes c if it is still the Hub's connection and unused.
func (h *Hub) closeIdle(c *hubConn) {
	h.mu.Lock()
	if h.conn != c || len(h.subs) > 0 {
		h.mu.Unlock()
		return
	}
	h.conn, h.idle = nil, nil
	h.mu.Unlock()
	_ = c.ps.Close()
}

// answered settles a Subscribe of channel on c: confirmed when err is nil,
// refused with err otherwise. Only the answer to the channel's latest
// Subscribe on c settles the Watch calls waiting for it.
func (h *Hub) answered(c *hubConn, channel string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != c {
		return
	}
	if c.pending[channel]--; c.pending[channel] > 0 {
		return
	}
	delete(c.pending, channel)
	if s := h.subs[channel]; s != nil && !s.ok {
		s.ok, s.err = true, err
		close(s.confirmed)
	}
}

func (h *Hub) message(c *hubConn, channel, payload string) {
	h.mu.Lock()
	var fs []func(string)
	if s := h.subs[channel]; h.conn == c && s != nil {
		fs = make([]func(string), 0, len(s.handlers))
		for _, f := range s.handlers {
			fs = append(fs, f)
		}
	}
	h.mu.Unlock()
	for _, f := range fs {
		f(payload)
	}
}

// broken replaces a failed connection and subscribes to every channel on
// the new one, retrying with growing pauses while subscriptions remain.
func (h *Hub) broken(c *hubConn) {
	h.mu.Lock()
	c.broken = true
	if h.conn != c {
		h.mu.Unlock()
		return
	}
	h.conn = nil
	h.mu.Unlock()
	_ = c.ps.Close()
	go func() {
		pause := 50 * time.Millisecond
		for {
			if h.reconnect() {
				return
			}
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
		}
	}()
}

// reconnect connects again unless the Hub has a connection or nothing to
// watch, and reports whether it is done.
func (h *Hub) reconnect() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if h.take(ctx) != nil {
		return false
	}
	defer h.done()
	h.mu.Lock()
	done := h.conn != nil || len(h.subs) == 0
	h.mu.Unlock()
	if done {
		return true
	}
	_, err := h.connect(ctx)
	return err == nil
}
