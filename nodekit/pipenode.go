package nodekit

import (
	"context"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/internal/runner"
)

// A PipeNode is a driver.Node over a client that pipelines typed commands (a
// Pipe) and subscribes with a blocking Receive (a Receiver): a driver
// over such a client (rueidis, valkey-go) embeds it and supplies only the
// client-specific Pipe and Receiver. Every call honours its context's
// deadline. A Run under a context with a deadline goes straight to the
// client, which puts the deadline on the socket and on the dial, while the
// node's calls are answered; after a call the server did not answer, and
// for a context that can end without a deadline (a cancellation), the Node
// waits for the replies in a goroutine of its own and returns as soon as
// the context ends (the abandoned commands end when the client gives up on
// them). So a context with a deadline that is canceled earlier ends a call
// to an open connection at its deadline. A context that cannot end costs no
// goroutine. On a Cluster client the keys of a call, and the calls of a
// RunWait, must share a hash slot, else they fail with dlm.ErrInvalid.
type PipeNode[C, R any] struct {
	p    Pipe[C, R]
	name string
	hub  *Hub
	st   pipeState
}

// NewPipeNode returns a PipeNode named name over p, which watches
// channels through r (NewReceiverHub).
func NewPipeNode[C, R any](name string, p Pipe[C, R], r Receiver) *PipeNode[C, R] {
	n := &PipeNode[C, R]{p: p, name: name, hub: NewReceiverHub(r)}
	n.st.runs = runner.New(runnable.run)
	return n
}

// String returns the node's name.
func (n *PipeNode[C, R]) String() string { return n.name }

// Routing implements Router: by hash slot for a Cluster client, one server
// otherwise (a standalone or Sentinel client).
func (n *PipeNode[C, R]) Routing() Routing {
	if n.p.Cluster() {
		return RoutingBySlot
	}
	return RoutingOneServer
}

// Run implements driver.Node (RunPipe): one Do for one call, one DoMulti for
// several (on a Cluster, one per hash slot, side by side). A call whose
// keys span slots fails unsent.
func (n *PipeNode[C, R]) Run(ctx context.Context, calls []driver.Call) {
	runPipe(ctx, n.p, calls, &n.st)
}

// RunWait implements driver.Node (RunWaitPipe): the calls and the WAIT,
// marked blocking, in one dedicated DoMulti, which the client sends on a
// connection of its own (on a Cluster, one to the calls' slot's primary)
// and closes unless every reply arrived, so an abandoned WAIT holds up
// nothing.
func (n *PipeNode[C, R]) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	return RunWaitPipe(ctx, n.p, calls, w)
}

// Watch implements driver.Node with one Receive per channel (NewReceiverHub)
// and UNSUBSCRIBE on its connection. When the connection breaks, the client
// (or, when it does not retry, the Hub) subscribes again on a new one. On a
// Cluster it subscribes shard channels (SSUBSCRIBE) on the master of the
// channel's slot, again when the slot moves. Watch fails at once on an
// error reply or a closed client (Receiver.Final). The node must be its
// client's only subscriber of its channels.
func (n *PipeNode[C, R]) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	return n.hub.Watch(ctx, channel, notify)
}
