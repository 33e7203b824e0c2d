// Package redigo adapts a redigo pool (github.com/gomodule/redigo) to
// driver.Node; a pool with Sentinels.Dial as its DialContext follows a primary.
//
// Deadlines: a call takes its connection with Pool.GetContext and reads its
// replies within the connection's read timeout; when ctx ends first (its
// deadline passes or it is cancelled), the connection is closed at once, as
// redis.ReceiveContext closes it: a call returns by ctx's deadline even if
// the server stopped answering, and a connection with replies unread is
// never reused. Writes are bounded by the connection's write timeout.
package redigo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm/nodekit"
)

// Node is a driver.Node over a *redis.Pool. It does not close the pool.
type Node struct {
	pool *redis.Pool
	name string
	hub  *nodekit.Hub // shared by copies made with WithName
}

// New returns a Node over p, or nil when p is nil (which strategies reject).
// A pool does not know its server's address: name the node with WithName.
func New(p *redis.Pool) *Node {
	if p == nil {
		return nil
	}
	return &Node{pool: p, name: fmt.Sprintf("redigo(pool@%p)", p), hub: nodekit.NewHub(openPubSub(p))}
}

// WithName returns a copy of n named name: its address, or its master's.
func (n *Node) WithName(name string) *Node { return &Node{pool: n.pool, name: name, hub: n.hub} }

// String names the node.
func (n *Node) String() string { return n.name }

// Routing implements nodekit.Router: a pool dials one server.
func (n *Node) Routing() nodekit.Routing { return nodekit.RoutingOneServer }

// Watch implements driver.Node with a nodekit.Hub over one connection dialled
// with the pool's DialContext (or Dial), outside its accounting. Reads have
// no deadline: TCP keepalive (redis.DialKeepAlive) notices a lost server.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	return n.hub.Watch(ctx, channel, notify)
}

// pubSub is the nodekit.PubSub primitive over a dedicated connection.
type pubSub struct {
	redis.PubSubConn
	mu      sync.Mutex
	pending [][]string // channels of each SUBSCRIBE not fully answered, oldest first
}

func openPubSub(p *redis.Pool) func(context.Context, nodekit.Events) (nodekit.PubSub, error) {
	return func(ctx context.Context, ev nodekit.Events) (nodekit.PubSub, error) {
		var c redis.Conn
		err := errors.New("dlm: redigo: the pool has neither DialContext nor Dial")
		if p.DialContext != nil {
			c, err = p.DialContext(ctx)
		} else if p.Dial != nil {
			c, err = p.Dial()
		}
		if err != nil {
			return nil, err
		}
		ps := &pubSub{PubSubConn: redis.PubSubConn{Conn: c}}
		go ps.receive(ev)
		return ps, nil
	}
}

// receive reports events until the connection fails. An error reply
// refuses the oldest SUBSCRIBE (Redis answers in order, and refuses a
// SUBSCRIBE as a whole, in one reply that names no channel).
func (ps *pubSub) receive(ev nodekit.Events) {
	for {
		switch m := ps.ReceiveWithTimeout(0).(type) { // 0: no read deadline
		case redis.Error:
			for _, ch := range ps.answered(true) {
				ev.Refused(ch, m)
			}
		case error: // the Hub closes the connection
			ev.Broken(m)
			return
		case redis.Subscription:
			if m.Kind == "subscribe" {
				ps.answered(false)
				ev.Subscribed(m.Channel)
			}
		case redis.Message:
			ev.Message(m.Channel, string(m.Data))
		}
	}
}

// answered takes the answered channels off the oldest pending SUBSCRIBE:
// all of them when refused, else the first.
func (ps *pubSub) answered(refused bool) []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.pending) == 0 {
		return nil
	}
	chans := ps.pending[0]
	if !refused && len(chans) > 1 {
		ps.pending[0] = chans[1:]
		return chans[:1]
	}
	ps.pending = ps.pending[1:]
	return chans
}

func (ps *pubSub) Subscribe(_ context.Context, channels ...string) error {
	ps.mu.Lock()
	defer ps.mu.Unlock() // held while sending, so the queue keeps the send order
	ps.pending = append(ps.pending, channels)
	return ps.PubSubConn.Subscribe(redis.Args{}.AddFlat(channels)...)
}

func (ps *pubSub) Unsubscribe(_ context.Context, channels ...string) error {
	return ps.PubSubConn.Unsubscribe(redis.Args{}.AddFlat(channels)...)
}

// Run implements driver.Node on one connection from the pool.
func (n *Node) Run(ctx context.Context, calls []driver.Call) { _, _ = n.run(ctx, calls, nil, nil) }

// RunWait implements driver.Node. A read also ends at the connection's read
// timeout (redis.DialReadTimeout), so w.Timeout must stay below it.
func (n *Node) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	wait, err := nodekit.WaitCommand(w)
	reply, err := n.run(ctx, calls, wait, err)
	for i := len(calls) - 1; i >= 0; i-- { // the first failed call's error
		err = cmp.Or(calls[i].Err, err)
	}
	if err != nil {
		return driver.Acks{}, err
	}
	return nodekit.ParseAcks(w, reply)
}

// run sends calls, then wait if any, and returns wait's reply; a non-nil err
// fails every call. Send copies argv out, so one pooled argv serves all.
func (n *Node) run(ctx context.Context, calls []driver.Call, wait []string, err error) (any, error) {
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, nil
	}
	if len(calls) == 0 && wait == nil {
		return nil, nil
	}
	var c redis.Conn
	if err = cmp.Or(err, ctx.Err()); err == nil {
		c, err = n.pool.GetContext(ctx)
	}
	if err != nil && err.Error() == "redigo: get on closed pool" { // redigo exports no sentinel
		err = fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	err = replyErr(err) // the dial's AUTH, or a Sentinel's answer
	if err != nil {
		nodekit.Fail(calls, err)
		return nil, err
	}
	defer c.Close() // redigo's pool discards a connection that failed
	if ctx.Done() != nil {
		w := watches.Get().(*watch)
		w.c = c
		stop := context.AfterFunc(ctx, w.kill)
		defer func() {
			if stop() { // w.kill never runs: w is free again
				w.c = nil
				watches.Put(w)
				return
			}
			w.mu.Lock() // wait for w.kill, and keep it off c from now on
			w.c = nil
			w.mu.Unlock()
		}()
	}
	ap := argvPool.Get().(*[]any)
	argv := (*ap)[:0]
	for i := 0; i < len(calls) && err == nil; i++ {
		cmd, script := "EVAL", calls[i].Source
		if script == "" {
			cmd, script = "EVALSHA", calls[i].SHA1
		}
		argv = append(argv[:0], script, len(calls[i].Keys))
		argv = appendStrings(appendStrings(argv, calls[i].Keys), calls[i].Args)
		err = c.Send(cmd, argv...)
	}
	if wait != nil && err == nil {
		err = c.Send(wait[0], appendStrings(argv[:0], wait[1:])...)
	}
	clear(argv[:cap(argv)])
	*ap = argv[:0]
	argvPool.Put(ap)
	if err == nil {
		err = c.Flush()
	}
	for i := 0; i < len(calls) && err == nil; i++ {
		var r any
		if r, err = c.Receive(); err == nil {
			calls[i].Reply, calls[i].Err = nodekit.Ints(r)
		} else if _, ok := err.(redis.Error); ok { // the connection is in step
			calls[i].Err, err = replyErr(err), nil
		}
	}
	if err != nil { // the connection failed: redigo closed it
		err = withCtxErr(ctx, err)
		nodekit.Fail(calls, err)
		return nil, err
	}
	if wait == nil {
		return nil, nil
	}
	r, err := c.Receive()
	return r, replyErr(withCtxErr(ctx, err))
}

// A watch closes a call's connection when the call's context ends
// (context.AfterFunc), so that a read in progress fails at once; run
// takes it off the connection before putting the connection back.
type watch struct {
	mu   sync.Mutex
	c    redis.Conn // nil once the call is over
	kill func()     // the method value, made once
}

var watches = sync.Pool{New: func() any {
	w := new(watch)
	w.kill = w.close
	return w
}}

// close fails w's connection as redis.ReceiveContext does when its context
// ends first: it is a receive under a context whose deadline has passed,
// which marks the connection failed and closes its socket (the read in
// progress fails) without reading anything; the pool then discards it.
func (w *watch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c != nil {
		_, _ = redis.ReceiveContext(w.c, expired)
	}
}

// expired is a context whose deadline has passed.
var expired = func() context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel() // it has ended already; its Err stays DeadlineExceeded
	return ctx
}()

// replyErr returns an error reply of redigo (a redis.Error, which err is
// or wraps) as a *driver.ReplyError; an error that matches
// driver.ErrUnknownMaster is left as it is.
func replyErr(err error) error {
	if err == nil {
		return nil
	}
	var re redis.Error
	if errors.Is(err, driver.ErrUnknownMaster) || !errors.As(err, &re) {
		return err
	}
	return nodekit.Reply(string(re), err)
}

// appendStrings appends the strings of s.
func appendStrings(argv []any, s []string) []any {
	for _, v := range s {
		argv = append(argv, v)
	}
	return argv
}

// withCtxErr wraps an I/O error with ctx's when ctx ended or its deadline
// passed (the read deadline, set from ctx's, may fire first).
func withCtxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if _, reply := err.(redis.Error); err == nil || reply || cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// argvPool recycles argument lists: redigo takes arguments as []any.
var argvPool = sync.Pool{New: func() any { return new([]any) }}
