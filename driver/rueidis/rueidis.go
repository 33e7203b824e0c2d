// Package rueidis adapts any rueidis.Client (github.com/redis/rueidis):
// standalone, Sentinel or Cluster, to driver.Node. Every call honours its
// context's deadline. A call under a context with a deadline goes straight
// to the client, which puts the deadline on the socket and on the dial,
// while the node's calls are answered. After a call the server did not
// answer, and for a context that can end without a deadline, the Node waits
// for the replies in a goroutine of its own and returns as soon as the
// context ends, because rueidis alone does not always: a caller that comes
// while rueidis reopens a connection waits for that dial under the dialing
// caller's context, and with DisableAutoPipelining a call on an open
// connection watches only the deadline. So a context with a deadline that
// is canceled earlier ends a call to an open connection at its deadline.
// The Node sees a connection break only through its calls: after rueidis
// closed one in the background (a keep-alive ping that failed), a call that
// comes during another's dial waits for it, for at most the client's
// Dialer.Timeout (5s by default). A call sent alone that outlives its
// deadline makes rueidis close the connection and fail the calls queued
// behind it; those get an error that says so, not context.DeadlineExceeded.
// The abandoned commands end when the server answers or the client's
// ConnWriteTimeout passes. A batch of more than 128 calls goes then as
// DoMultis of 128 one after the other, so that those answered before the
// context ended keep their replies. A context that cannot end
// (context.Background) costs no goroutine. On a Cluster client the keys of
// a call, and the calls of a RunWait, must share a hash slot, else they
// fail with dlm.ErrInvalid.
package rueidis

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm/nodekit"
)

// Node is a driver.Node over a rueidis.Client. It does not close the client.
// Its methods are nodekit.PipeNode's: Run, RunWait (which rueidis sends on
// a dedicated connection), Watch (one Receive per channel; rueidis
// subscribes again when the connection breaks), Routing and String.
type Node struct {
	*nodekit.PipeNode[rueidis.Completed, rueidis.RedisResult]
}

// New returns a Node over c, or nil when c is nil (which strategies reject).
// It is named after the addresses c knows when New is called.
func New(c rueidis.Client) *Node {
	if c == nil {
		return nil
	}
	p := pipe{c}
	name := "rueidis(" + strings.Join(slices.Sorted(maps.Keys(c.Nodes())), ",") + ")"
	return &Node{nodekit.NewPipeNode(name, p, nodekit.Receiver{Receive: p.receive, Final: final, Sharded: p.Cluster()})}
}

// pipe is the nodekit.Pipe and Receiver of a rueidis.Client.
type pipe struct{ c rueidis.Client }

func (p pipe) Cluster() bool { return p.c.Mode() == rueidis.ClientModeCluster }

func (p pipe) Slot(cmd rueidis.Completed) uint16 { return cmd.Slot() }

func (p pipe) Script(c *driver.Call) rueidis.Completed {
	if c.Source != "" {
		return p.c.B().Eval().Script(c.Source).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return p.c.B().Evalsha().Sha1(c.SHA1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
}

func (p pipe) Blocking(args ...string) rueidis.Completed {
	return p.c.B().Arbitrary(args...).Blocking()
}

func (p pipe) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return p.c.Do(ctx, cmd)
}

// DoMulti sends dedicated batches, on a Cluster client, on a dedicated
// connection to their slot's primary (which never follows a redirection).
func (p pipe) DoMulti(ctx context.Context, cmds []rueidis.Completed, dedicated bool) []rueidis.RedisResult {
	if !dedicated || !p.Cluster() {
		return p.c.DoMulti(ctx, cmds...)
	}
	dc, release := p.c.Dedicate()
	resps := dc.DoMulti(ctx, cmds...)
	if slices.ContainsFunc(resps, func(r rueidis.RedisResult) bool { return r.NonRedisError() != nil }) {
		release = dc.Close
	}
	release()
	return resps
}

func (p pipe) Ints(r rueidis.RedisResult) ([]int64, error) {
	m, err := r.ToMessage()
	if err == nil && m.IsInt64() {
		n, _ := m.ToInt64()
		return []int64{n}, nil
	}
	var arr []rueidis.RedisMessage
	if err == nil {
		arr, err = m.ToArray()
	}
	out, err := nodekit.IntsOf(arr, err, (*rueidis.RedisMessage).ToInt64)
	if err != nil {
		return nil, replyErr(err)
	}
	return out, nil
}

func (p pipe) Value(r rueidis.RedisResult) (any, error) {
	v, err := r.ToAny()
	if err != nil {
		return nil, replyErr(err)
	}
	return v, nil
}

// receive is nodekit.Receiver.Receive: a rueidis Receive, whose hooks
// report the confirmations and, once ctx ended, leave the channel on the
// connection.
func (p pipe) receive(ctx context.Context, ch string, sharded bool, confirmed func(), message func(string)) error {
	rctx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if (s.Kind == "subscribe" || s.Kind == "ssubscribe") && s.Channel == ch {
			confirmed()
		}
	})
	rctx = rueidis.WithOnReceiveReturnHook(rctx, func(err error, c rueidis.CommandClient) error {
		if ctx.Err() != nil {
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			unsubscribe := c.B().Unsubscribe().Channel(ch).Build()
			if sharded {
				unsubscribe = c.B().Sunsubscribe().Channel(ch).Build()
			}
			_ = c.Do(uctx, unsubscribe).Error()
		}
		return err
	})
	subscribe := p.c.B().Subscribe().Channel(ch).Build()
	if sharded {
		subscribe = p.c.B().Ssubscribe().Channel(ch).Build()
	}
	return p.c.Receive(rctx, subscribe, func(m rueidis.PubSubMessage) { message(m.Message) })
}

// final is nodekit.Receiver.Final: a closed client or an error reply.
func final(err error) bool {
	re := (*rueidis.RedisError)(nil)
	return errors.Is(err, rueidis.ErrClosing) || errors.As(err, &re)
}

// replyErr returns an error reply of rueidis (one its connection's
// handshake met included) as a *driver.ReplyError. rueidis strips "ERR " off
// every reply's text; nodekit.Reply restores the code.
func replyErr(err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) && !re.IsNil() {
		return nodekit.Reply(re.Error(), err)
	}
	return nodekit.HandshakeReply(err, rueidis.ErrNoCache)
}
