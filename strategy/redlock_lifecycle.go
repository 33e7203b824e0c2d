package strategy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// WatchRelease implements driver.Strategy. It subscribes to the key's
// release channel (the release script publishes on it) on every node, in
// parallel, and returns once every subscription was
// confirmed or failed, or the per-node timeout passed, with at least one
// active; subscriptions confirmed later are kept too. A release publishes on
// every node that held the lock and saw a refused acquisition, and the key
// can be taken again once a quorum of nodes released it: messages from
// distinct nodes are taken for one release, which notifies once, when a
// quorum of them has come, or when the per-node timeout has passed since
// the first (some nodes may not publish). A second message from one node
// begins another release. Every notification is a hint. When no node could
// subscribe the error joins the nodes' errors (matching
// errors.ErrUnsupported when the nodes cannot watch). stop ends every
// subscription, including those still being made.
func (s *redlock) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	if err := s.cfg.checkCall(key, "-", 0, false); err != nil {
		return nil, err
	}
	channel := lockName(key)
	// Watches still being made end when ctx ends or stop is called.
	wctx, cancel := context.WithCancel(ctx)
	w := &watches{cancel: cancel}
	co := &coalescer{window: s.cfg.timeout, quorum: s.quorum, notify: notify}
	results := make(chan error, len(s.nodes))
	for i, n := range s.nodes {
		go func() {
			stop, err := n.Watch(wctx, channel, func(string) { co.message(i) })
			if err != nil {
				err = &nodeError{Node: s.names[i], Op: "watch", Err: err}
			} else {
				w.add(stop)
			}
			results <- err
		}()
	}
	timer := time.NewTimer(s.cfg.timeout)
	defer timer.Stop()
	var errs []error
wait:
	for range s.nodes {
		select {
		case err := <-results:
			if err != nil {
				errs = append(errs, err)
			}
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	if w.active() == 0 {
		w.stop()
		if len(errs) == 0 {
			errs = append(errs, contextError(ctx.Err(), context.Cause(ctx)))
			if errs[0] == nil {
				errs[0] = fmt.Errorf("%w %v", ErrNodeTimeout, s.cfg.timeout)
			}
		}
		return nil, fmt.Errorf("dlm: redlock watch %q: no node subscribed: %w", key, errors.Join(errs...))
	}
	return w.stop, nil
}

// watches collects the stop functions of subscriptions, also those made
// after it was stopped (they are stopped at once).
type watches struct {
	cancel  context.CancelFunc
	mu      sync.Mutex
	stops   []func()
	stopped bool
}

func (w *watches) add(stop func()) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		stop()
		return
	}
	w.stops = append(w.stops, stop)
	w.mu.Unlock()
}

func (w *watches) active() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.stops)
}

// stop ends every subscription; calling it again does nothing.
func (w *watches) stop() {
	w.mu.Lock()
	stops := w.stops
	w.stops, w.stopped = nil, true
	w.mu.Unlock()
	w.cancel()
	for _, f := range stops {
		f()
	}
}

// coalescer turns the messages one release publishes on several nodes into
// one notification, sent when messages from a quorum of distinct nodes have
// come, or a window after the first message when fewer came. Notifying at
// the first message would wake a waiter while the release was still on its
// way to the other nodes: refused there, it would wait for the messages
// that follow, which then could not notify again.
type coalescer struct {
	window time.Duration
	quorum int
	notify func()

	mu       sync.Mutex
	round    uint64    // counts releases; a round's timer checks it is still current
	first    time.Time // of the round's first message
	seen     uint64    // bit i: node i sent in this round
	n        int       // messages in this round (nodes past 63 always count)
	notified bool      // this round notified
}

func (c *coalescer) message(i int) {
	var bit uint64
	if i < 64 {
		bit = 1 << i
	}
	c.mu.Lock()
	now := time.Now()
	notify := false
	if c.n == 0 || c.seen&bit != 0 || now.Sub(c.first) >= c.window {
		// Another release: one whose round did not notify yet has ended.
		notify = c.n > 0 && !c.notified
		c.round++
		c.first, c.seen, c.n, c.notified = now, 0, 0, false
		round := c.round
		time.AfterFunc(c.window, func() { c.timeout(round) })
	}
	c.seen |= bit
	c.n++
	if !c.notified && c.n >= c.quorum {
		c.notified, notify = true, true
	}
	c.mu.Unlock()
	if notify {
		c.notify()
	}
}

// timeout notifies for round when fewer than a quorum of nodes sent.
func (c *coalescer) timeout(round uint64) {
	c.mu.Lock()
	notify := c.round == round && !c.notified
	c.notified = c.notified || notify
	c.mu.Unlock()
	if notify {
		c.notify()
	}
}
