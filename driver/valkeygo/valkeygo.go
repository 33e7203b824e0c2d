// Package valkeygo adapts any valkey.Client (github.com/valkey-io/valkey-go,
// the Valkey project's client): standalone, Sentinel or Cluster, to
// driver.Node. Every call honours its context's deadline, as driver/rueidis's
// do (valkey-go is a fork of rueidis): a call under a context with a
// deadline goes straight to the client while the node's calls are
// answered; after a call the server did not answer, and for a context that
// can end without a deadline, the Node waits for the replies in a goroutine
// of its own and returns as soon as the context ends. So a context with a
// deadline that is canceled earlier ends a call to an open connection at
// its deadline. A context that cannot end (context.Background) costs no
// goroutine. On a Cluster client the keys of a call, and the calls of a
// RunWait, must share a hash slot, else they fail with dlm.ErrInvalid. The
// Node's code is nodekit's (PipeNode), shared with driver/rueidis.
package valkeygo

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm/nodekit"
)

// Node is a driver.Node over a valkey.Client. It does not close the client.
// Its methods are nodekit.PipeNode's: Run, RunWait (which valkey-go sends on
// a dedicated connection), Watch (one Receive per channel; valkey-go
// subscribes again when the connection breaks), Routing and String.
type Node struct {
	*nodekit.PipeNode[valkey.Completed, valkey.ValkeyResult]
}

// New returns a Node over c, or nil when c is nil (which strategies reject).
// It is named after the addresses c knows when New is called.
func New(c valkey.Client) *Node {
	if c == nil {
		return nil
	}
	p := pipe{c}
	name := "valkeygo(" + strings.Join(slices.Sorted(maps.Keys(c.Nodes())), ",") + ")"
	return &Node{nodekit.NewPipeNode(name, p, nodekit.Receiver{Receive: p.receive, Final: final, Sharded: p.Cluster()})}
}

// pipe is the nodekit.Pipe and Receiver of a valkey.Client.
type pipe struct{ c valkey.Client }

func (p pipe) Cluster() bool { return p.c.Mode() == valkey.ClientModeCluster }

func (p pipe) Slot(cmd valkey.Completed) uint16 { return cmd.Slot() }

func (p pipe) Script(c *driver.Call) valkey.Completed {
	if c.Source != "" {
		return p.c.B().Eval().Script(c.Source).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return p.c.B().Evalsha().Sha1(c.SHA1).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
}

func (p pipe) Blocking(args ...string) valkey.Completed { return p.c.B().Arbitrary(args...).Blocking() }

func (p pipe) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	return p.c.Do(ctx, cmd)
}

// DoMulti sends dedicated batches, on a Cluster client, on a dedicated
// connection to their slot's primary (which never follows a redirection).
func (p pipe) DoMulti(ctx context.Context, cmds []valkey.Completed, dedicated bool) []valkey.ValkeyResult {
	if !dedicated || !p.Cluster() {
		return p.c.DoMulti(ctx, cmds...)
	}
	dc, release := p.c.Dedicate()
	resps := dc.DoMulti(ctx, cmds...)
	if slices.ContainsFunc(resps, func(r valkey.ValkeyResult) bool { return r.NonValkeyError() != nil }) {
		release = dc.Close
	}
	release()
	return resps
}

func (p pipe) Ints(r valkey.ValkeyResult) ([]int64, error) {
	m, err := r.ToMessage()
	if err == nil && m.IsInt64() {
		n, _ := m.ToInt64()
		return []int64{n}, nil
	}
	var arr []valkey.ValkeyMessage
	if err == nil {
		arr, err = m.ToArray()
	}
	out, err := nodekit.IntsOf(arr, err, (*valkey.ValkeyMessage).ToInt64)
	if err != nil {
		return nil, replyErr(err)
	}
	return out, nil
}

func (p pipe) Value(r valkey.ValkeyResult) (any, error) {
	v, err := r.ToAny()
	if err != nil {
		return nil, replyErr(err)
	}
	return v, nil
}

// receive is nodekit.Receiver.Receive: a valkey-go Receive, whose hooks
// report the confirmations and, once ctx ended, leave the channel on the
// connection.
func (p pipe) receive(ctx context.Context, ch string, sharded bool, confirmed func(), message func(string)) error {
	rctx := valkey.WithOnSubscriptionHook(ctx, func(s valkey.PubSubSubscription) {
		if (s.Kind == "subscribe" || s.Kind == "ssubscribe") && s.Channel == ch {
			confirmed()
		}
	})
	rctx = valkey.WithOnReceiveReturnHook(rctx, func(err error, c valkey.CommandClient) error {
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
	return p.c.Receive(rctx, subscribe, func(m valkey.PubSubMessage) { message(m.Message) })
}

// final is nodekit.Receiver.Final: a closed client or an error reply.
func final(err error) bool {
	ve := (*valkey.ValkeyError)(nil)
	return errors.Is(err, valkey.ErrClosing) || errors.As(err, &ve)
}

// replyErr returns an error reply of valkey-go (one its connection's
// handshake met included) as a *driver.ReplyError. valkey-go strips "ERR "
// off every reply's text; nodekit.Reply restores the code.
func replyErr(err error) error {
	var ve *valkey.ValkeyError
	if errors.As(err, &ve) && !ve.IsNil() {
		return nodekit.Reply(ve.Error(), err)
	}
	return nodekit.HandshakeReply(err, valkey.ErrNoCache)
}
