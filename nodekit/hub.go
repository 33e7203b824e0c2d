package nodekit

import (
	"context"
	"sync"
	"time"
)

// A PubSub is a driver's dedicated pub/sub connection: the primitive a Hub
// builds dlm.Node.Watch on. Its methods are called by one Hub, with the
// Hub's lock held, so they need no locking of their own against each other;
// for the same reason they must not wait for the server's replies (the
// Events callbacks that report them take that lock): they send and return.
type PubSub interface {
	// Subscribe asks the server to subscribe to channels. It does not wait
	// for the confirmations: the driver reports them with Events.Subscribed.
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
// ends. It is safe for concurrent use. The zero Hub is not usable; see
// NewHub.
type Hub struct {
	open func(ctx context.Context, ev Events) (PubSub, error)

	mu     sync.Mutex
	conn   *hubConn // nil while closed
	subs   map[string]*hubSub
	nextID int
	idle   *time.Timer
}

type hubConn struct {
	ps PubSub
	// pending counts, per channel, the subscriptions asked for and not yet
	// confirmed: a channel unsubscribed and subscribed again must be
	// confirmed by the reply to the last SUBSCRIBE, not to an earlier one.
	pending map[string]int
}

type hubSub struct {
	handlers  map[int]func(string)
	confirmed chan struct{}
	ok        bool  // confirmed is closed
	err       error // why it was refused; set before confirmed is closed
}

// NewHub returns a Hub that opens its connection with open. open must
// return once the connection is usable and report through ev until Close.
func NewHub(open func(ctx context.Context, ev Events) (PubSub, error)) *Hub {
	return &Hub{open: open, subs: map[string]*hubSub{}}
}

// Watch implements dlm.Node.Watch.
func (h *Hub) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err // neither dial nor subscribe for a call already over
	}
	h.mu.Lock()
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.conn == nil {
		if err := h.connectLocked(ctx); err != nil {
			h.mu.Unlock()
			return nil, err
		}
	}
	s := h.subs[channel]
	first := s == nil
	if first {
		s = &hubSub{handlers: map[int]func(string){}, confirmed: make(chan struct{})}
		h.subs[channel] = s
	}
	id := h.nextID
	h.nextID++
	s.handlers[id] = notify
	var err error
	if first {
		h.conn.pending[channel]++
		err = h.conn.ps.Subscribe(ctx, channel)
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

// connectLocked opens a connection whose events reach the Hub for as long
// as it is the Hub's, and subscribes on it to every channel watched.
func (h *Hub) connectLocked(ctx context.Context) error {
	c := &hubConn{pending: map[string]int{}}
	ps, err := h.open(context.WithoutCancel(ctx), Events{
		Message:    func(ch, payload string) { h.message(c, ch, payload) },
		Subscribed: func(ch string) { h.subscribed(c, ch) },
		Refused:    func(ch string, err error) { h.refused(c, ch, err) },
		Broken:     func(error) { h.broken(c) },
	})
	if err != nil {
		return err
	}
	c.ps = ps
	if len(h.subs) > 0 {
		chans := make([]string, 0, len(h.subs))
		for ch := range h.subs {
			chans = append(chans, ch)
			c.pending[ch]++
		}
		if err := ps.Subscribe(ctx, chans...); err != nil {
			_ = ps.Close()
			return err
		}
	}
	h.conn = c
	return nil
}

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
	if h.conn == nil {
		return
	}
	// Under the lock, so that a later Watch's SUBSCRIBE follows this.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = h.conn.ps.Unsubscribe(ctx, channel)
	cancel()
	if len(h.subs) == 0 && h.idle == nil {
		c := h.conn
		h.idle = time.AfterFunc(HubLinger, func() { h.closeIdle(c) })
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

func (h *Hub) subscribed(c *hubConn, channel string) {
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
		s.ok = true
		close(s.confirmed)
	}
}

// refused answers a Subscribe as subscribed does, with a refusal.
func (h *Hub) refused(c *hubConn, channel string, err error) {
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
			h.mu.Lock()
			if h.conn != nil || len(h.subs) == 0 {
				h.mu.Unlock()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := h.connectLocked(ctx)
			cancel()
			h.mu.Unlock()
			if err == nil {
				return
			}
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
		}
	}()
}
