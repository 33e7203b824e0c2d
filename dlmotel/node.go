package dlmotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlmgo/dlm/nodekit"
)

// Node is a driver.Node that reports each call (see Observer.WrapNode).
type Node struct {
	node   driver.Node
	name   string
	errors metric.Int64Counter
	// AddOptions of dlm.node.errors, by error.type
	timeout, canceled, other []metric.AddOption
	attrName                 attribute.KeyValue
}

var (
	_ driver.Node    = (*Node)(nil)
	_ nodekit.Router = (*Node)(nil)
)

// WrapNode returns n reporting as name (the dlm.node attribute) to the
// providers given to New: each failed script call counts in
// dlm.node.errors, and each call whose context carries a recording span
// (the span of the Lock call it serves, or any other) adds a "dlm.node"
// event to it. Wrap each node before building the strategy over it.
//
// Calls that a strategy coalesces (several callers' calls in one round
// trip, see strategy.WithCoalescing) run under a context of their own:
// the Node finds each caller's context through it, and adds the event, for
// that caller's calls, to each caller's span (dlm.batch says how many
// callers shared the round trip).
//
// A call that ends after its span did (Redlock returns once a quorum
// granted; a slow master's call ends later) adds no event, for an ended
// span takes none; its error is counted all the same.
//
// A NOSCRIPT reply is not counted as an error: the script is then sent
// whole, as the module does routinely. The wrapper keeps n's routing
// (nodekit.Router) and its name in errors (fmt.Stringer; name when n has
// none).
func (o *Observer) WrapNode(n driver.Node, name string) *Node {
	return wrapNode(n, name, o.meter)
}

func wrapNode(n driver.Node, name string, meter metric.Meter) *Node {
	counter, err := meter.Int64Counter(NodeErrors, metric.WithUnit("{call}"),
		metric.WithDescription("Failed script calls, by node."))
	if err != nil {
		otel.Handle(err)
		counter, _ = noop.NewMeterProvider().Meter(ScopeName).Int64Counter(NodeErrors)
	}
	node := attribute.String("dlm.node", name)
	kind := func(k string) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(node, attribute.String("error.type", k)))}
	}
	return &Node{node: n, name: name, errors: counter, attrName: node,
		timeout: kind("timeout"), canceled: kind("canceled"), other: kind("other")}
}

// String returns the wrapped node's name in errors: its String, or the
// name given to Observer.WrapNode.
func (n *Node) String() string {
	if s, ok := n.node.(fmt.Stringer); ok {
		return s.String()
	}
	return n.name
}

// Routing implements nodekit.Router: the wrapped node's.
func (n *Node) Routing() nodekit.Routing { return nodekit.RoutingOf(n.node) }

// Unwrap returns the wrapped node.
func (n *Node) Unwrap() driver.Node { return n.node }

// Run implements driver.Node.
func (n *Node) Run(ctx context.Context, calls []driver.Call) {
	start := time.Now()
	n.node.Run(ctx, calls)
	n.report(ctx, "run", calls, nil, start)
}

// RunWait implements driver.Node.
func (n *Node) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	start := time.Now()
	acks, err := n.node.RunWait(ctx, calls, w)
	n.report(ctx, "runwait", calls, err, start)
	return acks, err
}

// Watch implements driver.Node.
func (n *Node) Watch(ctx context.Context, channel string, notify func(payload string)) (func(), error) {
	start := time.Now()
	stop, err := n.node.Watch(ctx, channel, notify)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		n.count(ctx, err)
	}
	n.event(ctx, "watch", 0, 1, boolInt(err != nil), err, start)
	return stop, err
}

// report counts calls' errors (and the wait's, err) and adds the events.
func (n *Node) report(ctx context.Context, op string, calls []driver.Call, err error, start time.Time) {
	failed, first := 0, err
	for i := range calls {
		if e := calls[i].Err; e != nil && !errors.Is(e, driver.ErrNoScript) {
			failed++
			n.count(ctx, e)
			if first == nil {
				first = e
			}
		}
	}
	if err != nil && failed == 0 {
		n.count(ctx, err) // the wait failed, not the calls
	}
	if b, ok := nodekit.BatchOf(ctx); ok {
		batch := 0
		b.Callers(func(context.Context, int, []int) { batch++ })
		b.Callers(func(cctx context.Context, own int, carried []int) {
			if own == 0 {
				return // none of this caller's calls in this run
			}
			pf, pfirst := 0, err
			for _, i := range carried {
				if e := calls[i].Err; e != nil && !errors.Is(e, driver.ErrNoScript) {
					pf++
					if pfirst == nil {
						pfirst = e
					}
				}
			}
			n.event(cctx, op, own, batch, pf, pfirst, start)
		})
		return
	}
	n.event(ctx, op, len(calls), 1, failed, first, start)
}

func (n *Node) count(ctx context.Context, err error) {
	opts := n.other
	var t interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.Canceled):
		opts = n.canceled
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout():
		opts = n.timeout
	}
	n.errors.Add(ctx, 1, opts...)
}

// event adds a "dlm.node" event to ctx's span, if it records.
func (n *Node) event(ctx context.Context, op string, calls, batch, failed int, err error, start time.Time) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		n.attrName,
		attribute.String("dlm.op", op),
		attribute.Int("dlm.calls", calls),
		attribute.Int("dlm.batch", batch),
		attribute.Int("dlm.failed", failed),
		attribute.Float64("dlm.duration", time.Since(start).Seconds()),
	}
	if err != nil {
		attrs = append(attrs, attribute.String("error.message", err.Error()))
	}
	span.AddEvent("dlm.node", trace.WithAttributes(attrs...))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
