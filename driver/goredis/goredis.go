// Package goredis adapts a go-redis v9 client (github.com/redis/go-redis/v9)
// to dlm.Node.
//
// Any redis.UniversalClient works: *redis.Client, *redis.ClusterClient, and
// the *redis.Client returned by redis.NewFailoverClient (Sentinel). RunWait
// needs one connection to the server the calls' keys live on: it works on a
// *redis.Client, a failover client and a *redis.ClusterClient (on the master
// of the first call's first key); other kinds, such as *redis.Ring, report
// an error matching errors.ErrUnsupported.
//
// A context's deadline bounds every call. go-redis applies it to the socket
// only when the client was built with ContextTimeoutEnabled, and it never
// watches cancellation. So a call goes straight to the client when its
// context cannot end, or has a deadline and the client has
// ContextTimeoutEnabled; otherwise it runs in a separate goroutine (one of
// the Node's, kept between calls) and returns as soon as the context ends,
// and the abandoned commands finish in the background within the client's
// ReadTimeout (they still read the calls' Keys and Args meanwhile); such a
// batch goes as pipelines of 128 calls one after the other, so that those
// answered before the context ended keep their replies. Set ContextTimeoutEnabled for the cheaper path.
// go-redis reads a pipeline's replies within ReadTimeout (default 3s) when
// the context has no deadline on the socket, so a Wait's Timeout must stay
// below it.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/runner"
	"github.com/dlmgo/dlm/nodekit"
)

// Node is a dlm.Node over a go-redis client. It does not close the client.
type Node struct {
	c         redis.UniversalClient
	ctxOnWire bool // the client applies context deadlines to its sockets
	name      string
	master    string                // the master name of Dial's failover client
	hub       *nodekit.Hub          // Watch's pub/sub connection
	flights   *runner.Pool[*flight] // run the calls awaited in a goroutine (see bounded)

	mu    sync.Mutex
	slots map[int]*nodekit.Hub // on a Cluster: Watch's shard connection per hash slot
}

var _ dlm.Node = (*Node)(nil)

// New returns a Node over c, or nil when c is nil (which strategies reject).
func New(c redis.UniversalClient) *Node {
	if c == nil {
		return nil
	}
	n := &Node{c: c, name: fmt.Sprintf("%T", c)}
	switch c := c.(type) {
	case *redis.Client:
		// A failover client's Addr is "FailoverClient"; go-redis does not
		// expose its master name.
		n.ctxOnWire, n.name = c.Options().ContextTimeoutEnabled, c.Options().Addr
	case *redis.ClusterClient:
		n.ctxOnWire = c.Options().ContextTimeoutEnabled
		n.name = "cluster(" + strings.Join(c.Options().Addrs, ",") + ")"
	}
	n.hub = nodekit.NewHub(n.openPubSub)
	n.flights = runner.New((*flight).run)
	return n
}

// String names the node by its address: "host:port" for a *redis.Client,
// "cluster(host:port,...)" for a *redis.ClusterClient, "primary of NAME"
// for Dial's client of a primary behind Sentinel (New can only say
// "FailoverClient").
func (n *Node) String() string { return n.name }

// Client returns the wrapped client.
func (n *Node) Client() redis.UniversalClient { return n.c }

// Routing implements nodekit.Router: one server for a *redis.Client (a
// failover client included), by hash slot for a *redis.ClusterClient,
// unknown for other kinds (a *redis.Ring shards by its own rules).
func (n *Node) Routing() nodekit.Routing {
	switch n.c.(type) {
	case *redis.Client:
		return nodekit.RoutingOneServer
	case *redis.ClusterClient:
		return nodekit.RoutingBySlot
	}
	return nodekit.RoutingUnknown
}

// Run implements dlm.Node: one call is one EVALSHA or EVAL, several are one
// go-redis pipeline (on a Cluster, one per master).
func (n *Node) Run(ctx context.Context, calls []dlm.Call) {
	if cc, ok := n.c.(*redis.ClusterClient); ok && len(calls) > 1 && n.byMaster(ctx, cc, calls) {
		return
	}
	if len(calls) > 0 {
		_, _ = n.bounded(ctx, calls, nil)
	}
}

// byMaster runs a Cluster batch as one pipeline per master, side by side,
// and reports whether it did (not when the calls live on one master): when
// one master stalls past the context, go-redis sets the error of a whole
// cluster pipeline on every command, and the replies of the others would
// be lost.
func (n *Node) byMaster(ctx context.Context, cc *redis.ClusterClient, calls []dlm.Call) bool {
	groups := map[string][]int{}
	for i := range calls {
		if len(calls[i].Keys) == 0 {
			return false
		}
		m, err := cc.MasterForKey(ctx, calls[i].Keys[0])
		if err != nil {
			return false
		}
		groups[m.Options().Addr] = append(groups[m.Options().Addr], i)
	}
	if len(groups) < 2 {
		return false
	}
	nodekit.RunGroups(calls, slices.Collect(maps.Values(groups)), func(part []dlm.Call) { _, _ = n.bounded(ctx, part, nil) })
	return true
}

// RunWait implements dlm.Node: the calls and the wait are one pipeline on
// one connection (see the package documentation for the client kinds).
func (n *Node) RunWait(ctx context.Context, calls []dlm.Call, w dlm.Wait) (dlm.Acks, error) {
	return n.bounded(ctx, calls, &w)
}

// Watch implements dlm.Node. All channels of a Node share one dedicated
// pub/sub connection (see nodekit.Hub). go-redis re-establishes a broken
// connection and its subscriptions; messages published in between are lost.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	if cc, ok := n.c.(*redis.ClusterClient); ok {
		return n.slotHub(cc, channel).Watch(ctx, channel, notify)
	}
	return n.hub.Watch(ctx, channel, notify)
}

// slotHub returns the Hub of channel's hash slot on a Cluster, whose
// connection SSUBSCRIBEs on the master that serves the slot: release
// scripts publish on shard channels there (strategy's release.lua), so
// that a message stays in its shard.
func (n *Node) slotHub(cc *redis.ClusterClient, channel string) *nodekit.Hub {
	slot := nodekit.Slot(channel)
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.slots[slot]
	if h == nil {
		if n.slots == nil {
			n.slots = map[int]*nodekit.Hub{}
		}
		h = nodekit.NewHub(func(ctx context.Context, ev nodekit.Events) (nodekit.PubSub, error) {
			return openShardPubSub(ctx, cc, ev), nil
		})
		n.slots[slot] = h
	}
	return h
}

// bounded runs calls, and then w's command unless w is nil, within ctx
// (see the package documentation). On the goroutine path the commands work
// on a private copy of calls, copied back only when they finish in time, so
// an abandoned goroutine never writes into calls.
func (n *Node) bounded(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (_ dlm.Acks, err error) {
	if cc, ok := n.c.(*redis.ClusterClient); ok {
		defer func() { followTopology(cc, calls, err) }()
	}
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, nil
	}
	var wcmd []string
	err = ctx.Err()
	if w != nil && err == nil {
		wcmd, err = nodekit.WaitCommand(*w)
	}
	if err != nil {
		nodekit.Fail(calls, err)
		return dlm.Acks{}, err
	}
	if _, ok := ctx.Deadline(); ctx.Done() == nil || ok && n.ctxOnWire {
		b := argBufs.Get().(*argBuf)
		acks, err := n.do(ctx, calls, w, wcmd, b)
		b.reset()
		argBufs.Put(b)
		for i := range calls {
			calls[i].Err = deadlineErr(ctx, calls[i].Err)
		}
		return acks, deadlineErr(ctx, err)
	}
	f := flights.Get().(*flight)
	f.n, f.ctx, f.w, f.wcmd = n, ctx, w, wcmd
	f.own = append(f.own[:0], calls...)
	n.flights.Go(f)
	select {
	case <-f.end:
		copy(calls, f.own)
		acks, err := f.acks, f.err
		f.reset()
		flights.Put(f)
		return acks, err
	case <-ctx.Done():
		f.mu.Lock()
		f.abandoned = true
		copy(calls, f.own[:f.done])
		nodekit.Fail(calls[f.done:], ctx.Err())
		f.mu.Unlock()
		return dlm.Acks{}, ctx.Err()
	}
}

// A flight is a batch that runs in a goroutine of its own (see bounded),
// on a private copy of its calls, its commands' arguments in buf. The
// goroutine signals end last and then no longer touches the flight, so a
// flight whose end was received is reused; an abandoned one, whose
// commands go-redis may still read, is left to the goroutine.
type flight struct {
	n    *Node
	ctx  context.Context
	w    *dlm.Wait
	wcmd []string
	own  []dlm.Call
	buf  argBuf
	acks dlm.Acks
	err  error
	end  chan struct{} // buffered: the goroutine never waits on it

	mu        sync.Mutex
	done      int // own[:done] hold their replies and are no longer written
	abandoned bool
}

var flights = sync.Pool{New: func() any { return &flight{end: make(chan struct{}, 1)} }}

func (f *flight) run() {
	if f.w != nil || len(f.own) <= chunk {
		f.acks, f.err = f.n.do(f.ctx, f.own, f.w, f.wcmd, &f.buf)
		f.end <- struct{}{}
		return
	}
	for lo := 0; lo < len(f.own); lo += chunk {
		if err := f.ctx.Err(); err != nil {
			nodekit.Fail(f.own[lo:], err)
			break
		}
		hi := min(lo+chunk, len(f.own))
		_, _ = f.n.do(f.ctx, f.own[lo:hi], nil, nil, &f.buf)
		f.mu.Lock()
		f.done = hi
		stop := f.abandoned
		f.mu.Unlock()
		if stop {
			return
		}
	}
	f.end <- struct{}{}
}

// reset clears a finished flight for reuse; a large copy of calls is
// dropped rather than kept.
func (f *flight) reset() {
	clear(f.own)
	f.own = f.own[:0]
	if cap(f.own) > 16 {
		f.own = nil
	}
	f.buf.reset()
	f.n, f.ctx, f.w, f.wcmd, f.acks, f.err, f.done, f.abandoned = nil, nil, nil, nil, dlm.Acks{}, nil, 0, false
}

// chunk is how many calls of a batch one pipeline sends when the batch
// runs in a goroutine of its own (the client does not put the context's
// deadline on its sockets): the pipelines go one after the other, and when
// the context ends the calls of those that finished keep their replies.
const chunk = 128

// do sends calls, and w's command wcmd after them unless it is nil, and
// sets every call's Reply or Err. With wcmd it returns the wait's reply, or
// the first failed call's error, or the wait's.
func (n *Node) do(ctx context.Context, calls []dlm.Call, w *dlm.Wait, wcmd []string, b *argBuf) (dlm.Acks, error) {
	b.grow(calls)
	if wcmd == nil && len(calls) == 1 {
		cmd := b.newCmd(ctx, &calls[0])
		_ = n.c.Process(ctx, scriptCmd{cmd})
		n.setReply(&calls[0], cmd)
		return dlm.Acks{}, nil
	}
	var p redis.Pipeliner
	if wcmd == nil {
		p = n.c.Pipeline()
	} else if m, err := n.pinned(ctx, calls); err != nil {
		nodekit.Fail(calls, err)
		return dlm.Acks{}, err
	} else {
		p = m.Pipeline()
	}
	cmds := make([]*redis.Cmd, len(calls))
	for i := range calls {
		cmds[i] = b.newCmd(ctx, &calls[i])
		_ = p.Process(ctx, scriptCmd{cmds[i]})
	}
	var wc *redis.Cmd
	if wcmd != nil {
		args := make([]any, len(wcmd))
		for i, s := range wcmd {
			args[i] = s
		}
		wc = p.Do(ctx, args...)
	}
	_, _ = p.Exec(ctx) // each command keeps its own reply or error
	for i, cmd := range cmds {
		n.setReply(&calls[i], cmd)
	}
	if wc == nil {
		return dlm.Acks{}, nil
	}
	for i := range calls {
		if calls[i].Err != nil {
			return dlm.Acks{}, calls[i].Err
		}
	}
	v, err := wc.Result()
	if err == nil {
		var acks dlm.Acks
		if acks, err = nodekit.ParseAcks(*w, v); err == nil {
			return acks, nil
		}
	}
	return dlm.Acks{}, fmt.Errorf("dlm: %s after the scripts: %w", wcmd[0], replyErr(err, n.master))
}

// pinned returns the client whose pipelines run on one connection to the
// server that holds the calls' keys.
func (n *Node) pinned(ctx context.Context, calls []dlm.Call) (*redis.Client, error) {
	switch c := n.c.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		if len(calls) == 0 || len(calls[0].Keys) == 0 {
			return nil, fmt.Errorf("%w: goredis: RunWait on a Cluster needs a first call with keys to find its master", dlm.ErrInvalid)
		}
		return c.MasterForKey(ctx, calls[0].Keys[0])
	}
	return nil, fmt.Errorf("goredis: %T cannot send scripts and WAIT on one connection (use *redis.Client, a failover client or *redis.ClusterClient): %w", n.c, errors.ErrUnsupported)
}

// followTopology has a Cluster client reload its slot map, in the
// background, when a call failed in a way a failover explains: its master
// did not answer (a refused, reset or timed-out connection, or the call's
// deadline passed) or the Cluster replied CLUSTERDOWN, MOVED or READONLY.
// go-redis reloads by itself only every ClusterStateReloadInterval (60s by
// default) and on redirections, so after a failover it would send a
// script, which it never retries, to the dead master until then. Reloads
// are cheap: go-redis runs at most one at a time, 200ms apart.
func followTopology(cc *redis.ClusterClient, calls []dlm.Call, err error) {
	if topologyError(err) || slices.ContainsFunc(calls, func(c dlm.Call) bool { return topologyError(c.Err) }) {
		cc.ReloadState(context.Background())
	}
}

// topologyError reports whether err is one after which a Cluster's slot
// map may be stale (see followTopology).
func topologyError(err error) bool {
	var re redis.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, dlm.ErrInvalid), errors.Is(err, dlm.ErrClosed):
		return false
	case errors.As(err, &re):
		msg := re.Error()
		return strings.HasPrefix(msg, "CLUSTERDOWN") || strings.HasPrefix(msg, "MOVED") || strings.HasPrefix(msg, "READONLY")
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}

// deadlineErr wraps a socket timeout with context.DeadlineExceeded once
// ctx's deadline has passed: the deadline on the socket was ctx's, and a
// script command is not retried, so go-redis returns the timeout as it is.
func deadlineErr(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// A scriptCmd is a script call's command, which go-redis never retries,
// whatever the client's MaxRetries: the script may have run before the
// connection broke or the read timed out.
type scriptCmd struct{ *redis.Cmd }

func (scriptCmd) NoRetry() bool { return true }

// An argBuf holds the command lists of a batch's script commands. It is
// reused once the commands completed: go-redis reads a command's arguments
// until then.
type argBuf struct{ args []any }

var argBufs = sync.Pool{New: func() any { return new(argBuf) }}

// grow makes room for the commands of calls, so that appending them moves
// the array at most once, here (the commands made first keep pointing into
// it).
func (b *argBuf) grow(calls []dlm.Call) {
	n := 0
	for i := range calls {
		n += 3 + len(calls[i].Keys) + len(calls[i].Args)
	}
	b.args = slices.Grow(b.args, n)
}

// reset empties b; a large array is dropped rather than kept.
func (b *argBuf) reset() {
	clear(b.args)
	b.args = b.args[:0]
	if cap(b.args) > 1024 {
		b.args = nil
	}
}

// newCmd returns c as an EVALSHA or EVAL command, its arguments appended
// to b as strings: the caller may reuse c's slices while an abandoned
// command is still being read.
func (b *argBuf) newCmd(ctx context.Context, c *dlm.Call) *redis.Cmd {
	a0 := len(b.args)
	if c.Source == "" {
		b.args = append(b.args, "evalsha", c.SHA1, len(c.Keys))
	} else {
		b.args = append(b.args, "eval", c.Source, len(c.Keys))
	}
	for _, s := range c.Keys {
		b.args = append(b.args, s)
	}
	for _, s := range c.Args {
		b.args = append(b.args, s)
	}
	cmd := redis.NewCmd(ctx, b.args[a0:len(b.args):len(b.args)]...)
	if len(c.Keys) > 0 {
		cmd.SetFirstKeyPos(3) // the Cluster routes by the first key
	}
	return cmd
}

var errNilReply = errors.New("dlm: script replied nil, want an integer or an array of integers")

// setReply sets c's Reply or Err from cmd's reply. A command whose reply
// was read keeps it when a later one failed: go-redis sets the error that
// cut a pipeline on every command without an error of its own, those whose
// replies it had read included. Its reader sets a command's value only
// once the command's whole reply was read, and a script replies with an
// integer or an array, so such a value is the command's own reply.
func (n *Node) setReply(c *dlm.Call, cmd *redis.Cmd) {
	v, err := cmd.Result()
	if err == nil {
		c.Reply, c.Err = nodekit.Ints(v)
		return
	}
	n.setFailed(c, v, err)
}

// setFailed is setReply's path for a command with an error.
func (n *Node) setFailed(c *dlm.Call, v any, err error) {
	var re redis.Error
	switch v.(type) {
	case []any, int64:
		if err != nil && !errors.As(err, &re) {
			err = nil
		}
	}
	switch {
	case err == redis.Nil: //nolint:errorlint // the reply itself, not a failover client's lookup that met one
		c.Err = errNilReply
	case err != nil:
		c.Err = replyErr(err, n.master)
	default:
		c.Reply, c.Err = nodekit.Ints(v)
	}
}

// replyErr returns err, an error of the client, in dlm's forms: a closed
// client matches dlm.ErrClosed, a failover client whose Sentinels all said
// they do not know its master matches dlm.ErrUnknownMaster, and an error
// reply (one the connection's handshake met included) is a
// *dlm.ReplyError.
func replyErr(err error, master string) error {
	var re redis.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.ErrClosed):
		return fmt.Errorf("%w: %w", dlm.ErrClosed, err)
	case errors.Is(err, redis.Nil):
		// go-redis's failover client: every Sentinel replied nil to
		// SENTINEL GET-MASTER-ADDR-BY-NAME, or some did and others could
		// not be reached (then the master may yet be found).
		name := "of the failover client"
		if master != "" {
			name = fmt.Sprintf("%q", master)
		}
		if allNil(err) {
			return fmt.Errorf("%w %s (every Sentinel asked said so): %w", dlm.ErrUnknownMaster, name, err)
		}
		return fmt.Errorf("goredis: no Sentinel reached knows the master name %s: %w", name, err)
	case errors.As(err, &re):
		return nodekit.Reply(re.Error(), err)
	}
	return err
}

// allNil reports whether every error that err joins (through wrapping) is
// redis.Nil.
func allNil(err error) bool {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if !allNil(e) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return allNil(u.Unwrap())
	}
	return err == redis.Nil //nolint:errorlint // a leaf
}

// A shardPubSub is a redis.PubSub on shard channels, all of one hash slot.
type shardPubSub struct {
	cc    *redis.ClusterClient
	ps    *redis.PubSub
	ev    nodekit.Events
	start sync.Once
	done  chan struct{} // closed by Close

	mu      sync.Mutex
	leaving map[string]int // SUNSUBSCRIBEs sent and not yet confirmed, per channel
}

// Subscribe sends SSUBSCRIBE, and starts the dispatcher after the first:
// go-redis connects a PubSub on the first command, on the master of its
// channels' slot, or on a random node when the dispatcher's read comes
// first.
func (s *shardPubSub) Subscribe(ctx context.Context, channels ...string) error {
	err := s.ps.SSubscribe(ctx, channels...)
	s.start.Do(s.dispatch)
	return err
}

func (s *shardPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	for _, ch := range channels {
		s.leaving[ch]++
	}
	s.mu.Unlock()
	return s.ps.SUnsubscribe(ctx, channels...)
}

func (s *shardPubSub) Close() error {
	close(s.done)
	return s.ps.Close()
}

// slotMoveReload is how long a Hub waits after its slot moved before it
// subscribes again: the time go-redis takes to reload its slot map.
const slotMoveReload = 100 * time.Millisecond

// shardPing is how often a shard channel connection is checked. A
// redis.PubSub dials again by itself when its connection breaks, but on
// the master its client's slot map names, which after a failover stays
// the dead one until something reloads the map: a failed check reloads
// it. TestClusterWaiterFollowsFailover: subscribed again 17s after the
// master's kill without the check, 5.5s with it.
const shardPing = time.Second

// openShardPubSub opens a Hub's connection on a Cluster. Its dispatcher
// reports confirmations and messages. A server unsubscribes shard channels
// by itself when their slot moves to another master; the dispatcher then
// reloads the client's slot map and reports the connection broken, so that
// the Hub subscribes again on a new one, on the slot's new master.
func openShardPubSub(ctx context.Context, cc *redis.ClusterClient, ev nodekit.Events) *shardPubSub {
	return &shardPubSub{cc: cc, ps: cc.SSubscribe(ctx), ev: ev, leaving: map[string]int{}, done: make(chan struct{})}
}

func (s *shardPubSub) dispatch() {
	go func() {
		t := time.NewTicker(shardPing)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), shardPing)
				if err := s.ps.Ping(ctx); err != nil {
					s.cc.ReloadState(context.Background())
				}
				cancel()
			}
		}
	}()
	ch := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go func() {
		for m := range ch {
			switch m := m.(type) {
			case *redis.Subscription:
				switch m.Kind {
				case "ssubscribe":
					s.ev.Subscribed(m.Channel)
				case "sunsubscribe":
					s.mu.Lock()
					ours := s.leaving[m.Channel] > 0
					if ours {
						s.leaving[m.Channel]--
					}
					s.mu.Unlock()
					if !ours {
						// go-redis reloads the slot map in the background:
						// give it a moment before the Hub dials the new master.
						s.cc.ReloadState(context.Background())
						go func(ch string) {
							time.Sleep(slotMoveReload)
							s.ev.Broken(fmt.Errorf("dlm: the server unsubscribed %q: its slot moved", ch))
						}(m.Channel)
					}
				}
			case *redis.Message:
				s.ev.Message(m.Channel, m.Payload)
			}
		}
	}()
}

// openPubSub opens the Hub's connection, a redis.PubSub, and starts its
// dispatcher, which reports confirmations and messages until the PubSub
// closes. A redis.PubSub re-subscribes by itself after a broken connection,
// so Events.Broken is never called.
func (n *Node) openPubSub(ctx context.Context, ev nodekit.Events) (nodekit.PubSub, error) {
	ps := n.c.Subscribe(ctx)
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go func() {
		for m := range ch {
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					ev.Subscribed(m.Channel)
				}
			case *redis.Message:
				ev.Message(m.Channel, m.Payload)
			}
		}
	}()
	return newOrdered(ps), nil
}

// An ordered is a redis.PubSub whose SUBSCRIBE and UNSUBSCRIBE a goroutine
// of its own sends, in the order they were asked for, while the caller
// waits only until its context ends: go-redis's dispatcher re-establishes
// a broken connection under the PubSub's lock, with a dial that does not
// know the caller's context (TestConformance/.../WatchDialDeadline).
type ordered struct {
	ps   *redis.PubSub
	ops  chan func()
	done chan struct{}
	once sync.Once
}

func newOrdered(ps *redis.PubSub) *ordered {
	o := &ordered{ps: ps, ops: make(chan func()), done: make(chan struct{})}
	go func() {
		for {
			select {
			case f := <-o.ops:
				f()
			case <-o.done:
				return
			}
		}
	}()
	return o
}

// do has f run in its turn and waits for it until ctx ends.
func (o *ordered) do(ctx context.Context, f func(context.Context) error) error {
	res := make(chan error, 1)
	select {
	case o.ops <- func() { res <- f(ctx) }:
	case <-o.done:
		return fmt.Errorf("%w: the pub/sub connection is closed", dlm.ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *ordered) Subscribe(ctx context.Context, channels ...string) error {
	return o.do(ctx, func(ctx context.Context) error { return o.ps.Subscribe(ctx, channels...) })
}

func (o *ordered) Unsubscribe(ctx context.Context, channels ...string) error {
	return o.do(ctx, func(ctx context.Context) error { return o.ps.Unsubscribe(ctx, channels...) })
}

func (o *ordered) Close() error {
	o.once.Do(func() { close(o.done) })
	return o.ps.Close()
}
