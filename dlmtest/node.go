package dlmtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

var errClosed = fmt.Errorf("dlmtest: server closed: %w", dlm.ErrClosed)

// A Node is one client of a Server: a driver.Node, so that strategies run
// over it unchanged. Each Node has a link of its own to the server, with
// faults of its own (a partition cuts one client and not another), on top
// of the Server's. Its methods are safe for concurrent use.
type Node struct {
	s    *Server
	name string

	mu     sync.Mutex
	link   linkFaults
	faults func(reply bool) Fault
}

// A Fault is what happens to one message on a Node's link: a request to
// the server, or a reply (or published message) from it.
type Fault struct {
	Drop  bool          // the message is lost
	Delay time.Duration // the message is held this long
}

// SetFaults makes f decide the fate of every message on the node's link,
// on top of the other faults: requests (reply false; a lost request never
// runs, a delayed one holds the requests behind it) and replies and
// published messages (reply true). f is called from the node's and the
// server's goroutines, sometimes with the server's lock held: it must not
// block or call the Server or its Nodes. A simulator draws the faults
// from its seed in it. nil removes it.
func (n *Node) SetFaults(f func(reply bool) Fault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// fault asks the node's fault function, if any, about one message.
func (n *Node) fault(reply bool) Fault {
	n.mu.Lock()
	f := n.faults
	n.mu.Unlock()
	if f == nil {
		return Fault{}
	}
	return f(reply)
}

// request reports whether a request gets through the link, after the
// delay the link holds it.
func (n *Node) request() bool {
	if n.cut() {
		return false
	}
	f := n.fault(false)
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	return !f.Drop
}

var (
	_ driver.Node    = (*Node)(nil)
	_ nodekit.Router = (*Node)(nil)
)

// Node returns a new client of s.
func (s *Server) Node() *Node {
	return &Node{s: s, name: fmt.Sprintf("%s/client-%d", s.name, s.nodes.Add(1))}
}

// String names the node: its server's name and its own number.
func (n *Node) String() string { return n.name }

// Routing reports that every call goes to one server.
func (n *Node) Routing() nodekit.Routing { return nodekit.RoutingOneServer }

// Partition cuts the node from its server (on) or heals the cut (off).
// While cut, its requests and the replies to it are lost (calls end with
// their context, commands sent before the cut still run), and so are the
// messages published to its subscriptions.
func (n *Node) Partition(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.link.cut = on
}

// SetDelay holds every reply to this node for d (0: none), on top of the
// Server's delay.
func (n *Node) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.link.delay = d
}

// DropReplies loses the replies to the next k commands of this node: the
// commands run, the calls end with their context.
func (n *Node) DropReplies(k int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.link.drop = k
}

func (n *Node) cut() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.link.cut
}

// deliverAfter decides the fate of one reply to n: lost, or delivered
// after the returned delay.
func (n *Node) deliverAfter() (time.Duration, bool) {
	// Never both locks at once: publish takes s.mu, then n.mu.
	n.mu.Lock()
	cut, dropped, d := n.link.cut, n.link.drop > 0, n.link.delay
	if dropped {
		n.link.drop--
	}
	n.mu.Unlock()
	if cut || dropped {
		return 0, false
	}
	f := n.fault(true)
	if f.Drop {
		return 0, false
	}
	d += f.Delay
	s := n.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link.drop > 0 {
		s.link.drop--
		return 0, false
	}
	return d + s.link.delay, true
}

// A result is the reply to one request of a batch.
type result struct {
	i     int
	reply []int64
	err   error
	acks  driver.Acks
}

// send delivers r on out (buffered for the whole batch) when the link
// lets it through.
func (n *Node) send(out chan<- result, r result) {
	d, ok := n.deliverAfter()
	switch {
	case !ok:
	case d > 0:
		time.AfterFunc(d, func() { out <- r })
	default:
		out <- r
	}
}

// callReply converts a script's reply to a call's Reply or Err.
func callReply(r any) ([]int64, error) {
	if e, ok := r.(replyError); ok {
		return nil, nodekit.Reply(string(e), errors.New(string(e)))
	}
	if st, ok := r.(status); ok {
		return nil, fmt.Errorf("dlm: script replied status %q, want an integer or an array of integers", string(st))
	}
	return nodekit.Ints(r)
}

// goReply converts a reply for Server.Do.
func goReply(r any) (any, error) {
	switch v := r.(type) {
	case replyError:
		return nil, nodekit.Reply(string(v), errors.New(string(v)))
	case status:
		return string(v), nil
	}
	return r, nil
}

// Run runs each call's script on the server, in order, and sets its Reply
// or Err (see driver.Node). A call whose reply did not arrive when ctx ended
// fails with ctx's error; its command may still run.
func (n *Node) Run(ctx context.Context, calls []driver.Call) {
	n.runWait(ctx, calls, nil)
}

// RunWait runs calls as Run does and then WAIT (see driver.Node.RunWait):
// it answers how many replicas acknowledged the server's writes so far
// once enough did or its timeout passed. WAITAOF is refused as Redis
// 7.0 refuses it.
func (n *Node) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	if _, err := nodekit.WaitCommand(w); err != nil {
		for i := range calls {
			calls[i].Reply, calls[i].Err = nil, err
		}
		return driver.Acks{}, err
	}
	return n.runWait(ctx, calls, &w)
}

func (n *Node) runWait(ctx context.Context, calls []driver.Call, w *driver.Wait) (driver.Acks, error) {
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, nil
	}
	if err := ctx.Err(); err != nil {
		nodekit.Fail(calls, err)
		return driver.Acks{}, err
	}
	if len(calls) == 0 && w == nil {
		return driver.Acks{}, nil
	}
	// The connection works on a copy: Run keeps nothing of calls.
	reqs := make([]driver.Call, len(calls))
	for i, c := range calls {
		reqs[i] = driver.Call{SHA1: c.SHA1, Source: c.Source, Keys: slices.Clone(c.Keys), Args: slices.Clone(c.Args)}
	}
	want := len(reqs)
	if w != nil {
		want++
	}
	out := make(chan result, want)
	go n.conn(reqs, w, out)
	var acks driver.Acks
	var waitErr error
	got := 0
	take := func(r result) {
		got++
		if r.i < len(calls) {
			calls[r.i].Reply, calls[r.i].Err = r.reply, r.err
		} else {
			acks, waitErr = r.acks, r.err
		}
	}
	finish := func() (driver.Acks, error) {
		if err := firstErr(calls); err != nil {
			return driver.Acks{}, err
		}
		if waitErr != nil {
			return driver.Acks{}, waitErr
		}
		return acks, nil
	}
	// cut keeps the replies that arrived before the context ended (select
	// picks at random among ready cases) and fails the others with err.
	cut := func(err error) (driver.Acks, error) {
		for got < want {
			select {
			case r := <-out:
				take(r)
				continue
			default:
			}
			break
		}
		if got == want {
			return finish()
		}
		return driver.Acks{}, failRest(calls, err)
	}
	for got < want {
		select {
		case r := <-out:
			take(r)
		case <-ctx.Done():
			return cut(ctx.Err())
		case <-n.s.close:
			return cut(errClosed)
		}
	}
	return finish()
}

// failRest fails the calls without a reply with err and returns the
// first call's error, or err.
func failRest(calls []driver.Call, err error) error {
	nodekit.Fail(calls, err)
	if e := firstErr(calls); e != nil {
		return e
	}
	return err
}

func firstErr(calls []driver.Call) error {
	for _, c := range calls {
		if c.Err != nil {
			return c.Err
		}
	}
	return nil
}

// conn is the node's connection for one batch: it sends each request,
// unless the link is cut, and hands the replies the link lets through to
// out.
func (n *Node) conn(reqs []driver.Call, w *driver.Wait, out chan<- result) {
	n.s.mu.Lock()
	promoted := n.s.promoted // the primary the writes go to
	n.s.mu.Unlock()
	for i, c := range reqs {
		if !n.request() {
			continue // the request is lost
		}
		r, ok := n.s.run(func(sv *server) any { return sv.eval(c.SHA1, c.Source, c.Keys, c.Args) })
		if !ok {
			out <- result{i: i, err: errClosed}
			continue
		}
		reply, err := callReply(r)
		n.send(out, result{i: i, reply: reply, err: err})
	}
	if w == nil || !n.request() {
		return
	}
	if w.AOF {
		e := "ERR unknown command 'WAITAOF', with args beginning with: "
		n.s.run(func(sv *server) any { sv.stats["waitaof"]++; return nil })
		n.send(out, result{i: len(reqs), err: nodekit.Reply(e, errors.New(e))})
		return
	}
	n.s.mu.Lock()
	offset := n.s.offset
	n.s.mu.Unlock()
	if _, ok := n.s.run(func(sv *server) any { sv.stats["wait"]++; return nil }); !ok {
		out <- result{i: len(reqs), err: errClosed}
		return
	}
	timeout := (w.Timeout + time.Millisecond - 1).Truncate(time.Millisecond)
	count, err := n.s.wait(w.Replicas, offset, promoted, timeout)
	if err == errClosed {
		out <- result{i: len(reqs), err: errClosed}
		return
	}
	if err != nil {
		n.send(out, result{i: len(reqs), err: err})
		return
	}
	n.send(out, result{i: len(reqs), acks: driver.Acks{Replicas: int(count)}})
}

// Watch subscribes to channel (SUBSCRIBE) and returns once the server
// confirmed it; PUBLISH on channel then reaches notify, in order, from a
// goroutine of the subscription's. SPUBLISH reaches no Node, as on a
// server that is not a Cluster node.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub := &subscription{node: n, channel: channel, notify: notify, wake: make(chan struct{}, 1), done: make(chan struct{})}
	confirmed := make(chan result, 1)
	go func() {
		if !n.request() {
			return
		}
		_, ok := n.s.run(func(sv *server) any {
			s := n.s
			s.mu.Lock()
			defer s.mu.Unlock()
			if !sub.ended() {
				if s.subs[channel] == nil {
					s.subs[channel] = map[*subscription]struct{}{}
				}
				s.subs[channel][sub] = struct{}{}
			}
			return nil
		})
		if !ok {
			confirmed <- result{err: errClosed}
			return
		}
		n.send(confirmed, result{})
	}()
	select {
	case r := <-confirmed:
		if r.err != nil {
			sub.stop()
			return nil, r.err
		}
	case <-ctx.Done():
		sub.stop()
		return nil, ctx.Err()
	case <-n.s.close:
		sub.stop()
		return nil, errClosed
	}
	go sub.deliver()
	return sub.stop, nil
}

// A subscription is one Watch.
type subscription struct {
	node    *Node
	channel string
	notify  func(string)
	wake    chan struct{} // a message was queued
	done    chan struct{} // closed by end

	mu      sync.Mutex // held while notify runs, so stop waits for it
	queue   []string
	stopped bool
}

func (sub *subscription) push(m string) {
	sub.mu.Lock()
	if !sub.stopped {
		sub.queue = append(sub.queue, m)
	}
	sub.mu.Unlock()
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *subscription) ended() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.stopped
}

// end marks the subscription stopped and ends its goroutine; it returns
// once no notify runs.
func (sub *subscription) end() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.stopped {
		sub.stopped = true
		sub.queue = nil
		close(sub.done)
	}
}

// stop unsubscribes: no notify starts after it returns.
func (sub *subscription) stop() {
	s := sub.node.s
	s.mu.Lock()
	if subs := s.subs[sub.channel]; subs != nil {
		delete(subs, sub)
		if len(subs) == 0 {
			delete(s.subs, sub.channel)
		}
	}
	s.mu.Unlock()
	sub.end()
}

func (sub *subscription) deliver() {
	for {
		select {
		case <-sub.wake:
		case <-sub.done:
			return
		}
		for {
			sub.mu.Lock()
			if sub.stopped || len(sub.queue) == 0 {
				sub.mu.Unlock()
				break
			}
			m := sub.queue[0]
			sub.queue = sub.queue[1:]
			sub.notify(m)
			sub.mu.Unlock()
		}
	}
}
