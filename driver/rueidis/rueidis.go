// Package rueidis adapts any rueidis.Client (github.com/redis/rueidis):
// standalone, Sentinel or Cluster, to dlm.Node. Every call honours its
// context: for a context that can end, the Node waits for the replies in a
// goroutine of its own and returns as soon as the context ends, because
// rueidis alone does not always (not with DisableAutoPipelining, and not
// while it opens a connection: its handshake with a frozen server waits out
// the dial timeout, past any deadline); the abandoned commands end when the
// server answers or the client's ConnWriteTimeout passes. A batch of more
// than 128 calls goes then as DoMultis of 128 one after the other, so that
// those answered before the context ended keep their replies. A context
// that cannot end (context.Background) costs no goroutine. On a Cluster client the keys of a call, and the calls
// of a RunWait, must share a hash slot, else they fail with dlm.ErrInvalid.
package rueidis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Node is a dlm.Node over a rueidis.Client. It does not close the client.
type Node struct {
	c    rueidis.Client
	name string
	hub  *nodekit.Hub
	mu   sync.Mutex
	last map[string]*receive // each channel's latest subscription, until it ends
	// noShards is set once the server refused SSUBSCRIBE.
	noShards atomic.Bool
}

// New returns a Node over c, or nil when c is nil (which strategies reject).
// It is named after the addresses c knows when New is called.
func New(c rueidis.Client) *Node {
	if c == nil {
		return nil
	}
	n := &Node{c: c, name: "rueidis(" + strings.Join(slices.Sorted(maps.Keys(c.Nodes())), ",") + ")", last: map[string]*receive{}}
	n.hub = nodekit.NewHub(func(_ context.Context, ev nodekit.Events) (nodekit.PubSub, error) { return session{n, ev}, nil })
	return n
}

// String names the node by its client's addresses.
func (n *Node) String() string { return n.name }

// Routing implements nodekit.Router: by hash slot for a Cluster client, one
// server otherwise (a standalone or Sentinel client).
func (n *Node) Routing() nodekit.Routing {
	if n.c.Mode() == rueidis.ClientModeCluster {
		return nodekit.RoutingBySlot
	}
	return nodekit.RoutingOneServer
}

// Run implements dlm.Node: one Do for one call, one DoMulti for several
// (sent per primary on a Cluster). A call whose keys span slots fails unsent.
func (n *Node) Run(ctx context.Context, calls []dlm.Call) {
	if len(calls) == 1 && ctx.Done() == nil { // every lock's path: no slices
		if cmd, ok := n.script(&calls[0]); ok {
			calls[0].Reply, calls[0].Err = ints(n.c.Do(ctx, cmd))
		}
		return
	}
	if len(calls) > 1 && ctx.Done() != nil && n.c.Mode() == rueidis.ClientModeCluster && n.bySlot(ctx, calls) {
		return
	}
	_, _ = n.exec(ctx, calls, nil)
}

// bySlot runs a Cluster batch as one batch per hash slot, side by side, and
// reports whether it did (not when the calls share a slot): a batch whose
// context ends is abandoned whole, and the replies that other masters sent
// while one stalled would be lost.
func (n *Node) bySlot(ctx context.Context, calls []dlm.Call) bool {
	groups := map[uint16][]int{}
	for i := range calls {
		cmd, ok := n.script(&calls[i])
		if !ok {
			return false
		}
		groups[cmd.Slot()] = append(groups[cmd.Slot()], i)
	}
	if len(groups) < 2 {
		return false
	}
	nodekit.RunGroups(calls, slices.Collect(maps.Values(groups)), func(part []dlm.Call) { _, _ = n.exec(ctx, part, nil) })
	return true
}

// RunWait implements dlm.Node: the calls and a WAIT marked blocking in one
// DoMulti, which rueidis sends on a dedicated connection (on a Cluster, one
// to the calls' slot's primary) and closes unless every reply arrived, so
// an abandoned WAIT holds up nothing.
func (n *Node) RunWait(ctx context.Context, calls []dlm.Call, w dlm.Wait) (dlm.Acks, error) {
	wcmd, err := nodekit.WaitCommand(w)
	if err != nil {
		nodekit.Fail(calls, err)
		return dlm.Acks{}, err
	}
	resps, err := n.exec(ctx, calls, wcmd)
	if err != nil {
		return dlm.Acks{}, err
	}
	v, err := resps[len(calls)].ToAny()
	acks, perr := nodekit.ParseAcks(w, v)
	if err = cmp.Or(err, perr); err != nil {
		return dlm.Acks{}, fmt.Errorf("dlm: %s after the scripts: %w", wcmd[0], replyErr(err))
	}
	return acks, nil
}

// Watch implements dlm.Node with one Receive per channel (see nodekit.Hub)
// and UNSUBSCRIBE on its connection. When the connection breaks, rueidis
// (or, with DisableRetry, the Node) subscribes again on a new one. Watch
// fails at once on an error reply or a closed client. The Node must be its
// client's only subscriber of its channels.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	return n.hub.Watch(ctx, channel, notify)
}

// A receive is one subscription of a channel, run by one goroutine.
type receive struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once it has unsubscribed
}

// A session is the nodekit.PubSub of a Node's Hub. Its methods never wait
// for rueidis, whose reader may be waiting in an event for the Hub's lock.
type session struct {
	n  *Node
	ev nodekit.Events
}

func (s session) Subscribe(_ context.Context, channels ...string) error {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	for _, ch := range channels {
		ctx, cancel := context.WithCancel(context.Background())
		rc := &receive{cancel: cancel, done: make(chan struct{})}
		go s.n.receive(ctx, ch, s.ev, s.n.last[ch], rc)
		s.n.last[ch] = rc
	}
	return nil
}

// Unsubscribe stops the channels' latest subscriptions (the Hub's own).
func (s session) Unsubscribe(_ context.Context, channels ...string) error {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	for _, ch := range channels {
		if rc := s.n.last[ch]; rc != nil {
			rc.cancel()
		}
	}
	return nil
}

// Close does nothing: the Hub closes a session only once it is unused.
func (s session) Close() error { return nil }

// receive keeps ch subscribed until ctx ends, and then unsubscribes. It
// subscribes once prev, the channel's previous subscription, unsubscribed,
// and answers its Subscribe with one event: Subscribed, or Refused (also
// when stopped before the confirmation, for the Hub's count).
func (n *Node) receive(ctx context.Context, ch string, ev nodekit.Events, prev, rc *receive) {
	var answered atomic.Bool // one event per Subscribe, not per reconnection
	answer := func(err error) {
		switch {
		case !answered.CompareAndSwap(false, true):
		case err != nil:
			ev.Refused(ch, err)
		default:
			ev.Subscribed(ch)
		}
	}
	defer func() {
		answer(context.Canceled)
		n.mu.Lock()
		if n.last[ch] == rc {
			delete(n.last, ch)
		}
		n.mu.Unlock()
		close(rc.done)
	}()
	if prev != nil {
		select {
		case <-prev.done:
		case <-ctx.Done():
			return
		}
	}
	// On a Cluster, release scripts publish on shard channels (strategy's
	// release.lua), which rueidis subscribes on the master of the channel's
	// slot; a server unsubscribes them when the slot moves, and the loop
	// below subscribes again.
	// A server without shard channels (before 7.0; miniredis, which rueidis
	// takes for a Cluster) refuses SSUBSCRIBE: the release script then
	// publishes ordinary ones.
	var sharded atomic.Bool
	sharded.Store(n.c.Mode() == rueidis.ClientModeCluster && !n.noShards.Load())
	rctx := rueidis.WithOnSubscriptionHook(ctx, func(p rueidis.PubSubSubscription) {
		if (p.Kind == "subscribe" || p.Kind == "ssubscribe") && p.Channel == ch && ctx.Err() == nil {
			answer(nil)
		}
	})
	rctx = rueidis.WithOnReceiveReturnHook(rctx, func(err error, c rueidis.CommandClient) error {
		if ctx.Err() != nil { // stopped: leave the channel on this connection
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			unsubscribe := c.B().Unsubscribe().Channel(ch).Build()
			if sharded.Load() {
				unsubscribe = c.B().Sunsubscribe().Channel(ch).Build()
			}
			_ = c.Do(uctx, unsubscribe).Error()
		}
		return err
	})
	for {
		subscribe := n.c.B().Subscribe().Channel(ch).Build() // a command is sent once
		if sharded.Load() {
			subscribe = n.c.B().Ssubscribe().Channel(ch).Build()
		}
		err := n.c.Receive(rctx, subscribe, func(m rueidis.PubSubMessage) { ev.Message(ch, m.Message) })
		re := (*rueidis.RedisError)(nil)
		if sharded.Load() && errors.As(err, &re) && strings.Contains(re.Error(), "unknown command") {
			n.noShards.Store(true)
			sharded.Store(false)
			continue
		}
		if ctx.Err() == nil && (errors.Is(err, rueidis.ErrClosing) || errors.As(err, &re)) {
			answer(err)
			return
		}
		select { // the connection broke and rueidis did not subscribe again, or the server unsubscribed
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// exec runs calls in one DoMulti, with the command wait, if any, last, and
// returns the results or the error of the first failed call.
func (n *Node) exec(ctx context.Context, calls []dlm.Call, wait []string) ([]rueidis.RedisResult, error) {
	cmds, idx := make([]rueidis.Completed, 0, len(calls)+1), make([]int, 0, len(calls))
	for i := range calls {
		if cmd, ok := n.script(&calls[i]); ok {
			cmds, idx = append(cmds, cmd), append(idx, i)
		}
	}
	if wait != nil && n.c.Mode() == rueidis.ClientModeCluster && spansSlots(cmds) {
		nodekit.Fail(calls, fmt.Errorf("%w: rueidis: the calls of RunWait span hash slots", dlm.ErrInvalid))
		return nil, firstErr(calls)
	}
	if wait != nil {
		cmds = append(cmds, n.c.B().Arbitrary(wait...).Blocking())
	}
	resps, err := n.await(ctx, cmds, wait != nil) // no command: no round trip
	if err != nil {
		nodekit.Fail(calls, err)
		return nil, err
	}
	for j, i := range idx {
		calls[i].Reply, calls[i].Err = ints(resps[j])
	}
	return resps, firstErr(calls)
}

// script resets c's reply and builds its command, or sets c.Err.
func (n *Node) script(c *dlm.Call) (cmd rueidis.Completed, ok bool) {
	c.Reply, c.Err = nil, nil
	defer func() {
		if p := recover(); p != nil { // the builder's panic on keys in different slots
			c.Err = fmt.Errorf("%w: rueidis: %v", dlm.ErrInvalid, p)
		}
	}()
	if c.Source != "" {
		return n.c.B().Eval().Script(c.Source).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build(), true
	}
	return n.c.B().Evalsha().Sha1(c.SHA1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build(), true
}

// await sends cmds and returns their results. When ctx can end, it sends
// them from a goroutine of its own and returns ctx's error as soon as ctx
// ends; the abandoned goroutine touches nothing of the caller's.
func (n *Node) await(ctx context.Context, cmds []rueidis.Completed, dedicated bool) ([]rueidis.RedisResult, error) {
	if ctx.Done() == nil {
		return n.send(ctx, cmds, dedicated), nil
	}
	if !dedicated && len(cmds) > chunk {
		return n.chunked(ctx, cmds), nil
	}
	ch := make(chan []rueidis.RedisResult, 1)
	go func() { ch <- n.send(ctx, cmds, dedicated) }()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// chunk is how many commands of a large batch one DoMulti sends when the
// context can end (see chunked).
const chunk = 128

// chunked sends cmds as DoMultis of chunk commands, one after the other,
// from a goroutine of its own, and returns as soon as ctx ends: the results
// of the DoMultis that finished, and ctx's error for the others. rueidis
// gives a DoMulti cut by its context that error on every command, those
// whose replies it had read included.
func (n *Node) chunked(ctx context.Context, cmds []rueidis.Completed) []rueidis.RedisResult {
	var (
		mu        sync.Mutex
		own       = make([]rueidis.RedisResult, len(cmds))
		done      int // own[:done] are set
		abandoned bool
	)
	end := make(chan struct{})
	go func() {
		defer close(end)
		for lo := 0; lo < len(cmds) && ctx.Err() == nil; lo += chunk {
			hi := min(lo+chunk, len(cmds))
			r := n.c.DoMulti(ctx, cmds[lo:hi]...)
			mu.Lock()
			stop := abandoned
			if !stop {
				copy(own[lo:hi], r)
				done = hi
			}
			mu.Unlock()
			if stop {
				return
			}
		}
	}()
	select {
	case <-end:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	if done < len(own) {
		failed := rueidis.NewErrorResult(ctx.Err())
		for i := done; i < len(own); i++ {
			own[i] = failed
		}
	}
	return own
}

// send sends cmds in one DoMulti; dedicated ones, on a Cluster client, on a
// dedicated connection to their slot's primary (which never follows a
// redirection), dropped unless every reply arrived.
func (n *Node) send(ctx context.Context, cmds []rueidis.Completed, dedicated bool) []rueidis.RedisResult {
	if !dedicated || n.c.Mode() != rueidis.ClientModeCluster {
		return n.c.DoMulti(ctx, cmds...)
	}
	dc, release := n.c.Dedicate()
	resps := dc.DoMulti(ctx, cmds...)
	if slices.ContainsFunc(resps, func(r rueidis.RedisResult) bool { return r.NonRedisError() != nil }) {
		release = dc.Close
	}
	release()
	return resps
}

// spansSlots reports whether the keys of cmds lie in more than one hash
// slot (a command without keys has a slot number beyond 16383).
func spansSlots(cmds []rueidis.Completed) bool {
	keyed := slices.DeleteFunc(slices.Clone(cmds), func(c rueidis.Completed) bool { return c.Slot() >= 16384 })
	return slices.ContainsFunc(keyed, func(c rueidis.Completed) bool { return c.Slot() != keyed[0].Slot() })
}

func firstErr(calls []dlm.Call) error {
	if i := slices.IndexFunc(calls, func(c dlm.Call) bool { return c.Err != nil }); i >= 0 {
		return calls[i].Err
	}
	return nil
}

// ints converts a script's reply, an array of integers, to []int64.
func ints(res rueidis.RedisResult) ([]int64, error) {
	arr, err := res.ToArray()
	out := make([]int64, len(arr))
	for i := 0; err == nil && i < len(arr); i++ {
		out[i], err = arr[i].ToInt64()
	}
	if err != nil {
		return nil, replyErr(err)
	}
	return out, nil
}

// replyErr returns an error reply of rueidis (one its connection's
// handshake met included) as a *dlm.ReplyError. rueidis strips "ERR " off
// every reply's text; nodekit.Reply restores the code.
func replyErr(err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) && !re.IsNil() {
		return nodekit.Reply(re.Error(), err)
	}
	if errors.Is(err, rueidis.ErrNoCache) {
		// rueidis reports any error reply to its handshake's CLIENT
		// TRACKING (BUSY, LOADING, NOPERM) as ErrNoCache, after the
		// reply's text and the command: "BUSY Redis is busy...: [CLIENT
		// TRACKING ON OPTIN]\n...".
		if text, _, ok := strings.Cut(err.Error(), ": [CLIENT"); ok {
			return nodekit.Reply(text, err)
		}
	}
	return err
}
