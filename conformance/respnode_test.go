package conformance_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// RESPNode is a complete driver.Node over one TCP connection, speaking RESP
// with nothing but the standard library and nodekit: the smallest driver
// that passes conformance.RunNode. Calls take turns on the connection. It
// cannot Watch (it would need a second connection), and says so.
type RESPNode struct {
	addr string
	turn chan struct{} // holds a token while a call uses the connection
	conn net.Conn      // nil until dialed, and after a call left it out of step
	r    *bufio.Reader
	bug  string // set by the teeth tests (broken_test.go) to break it on purpose
}

func NewRESPNode(addr string) *RESPNode {
	return &RESPNode{addr: addr, turn: make(chan struct{}, 1)}
}

func (n *RESPNode) String() string { return "resp(" + n.addr + ")" }

// Close closes the connection; a call after Close dials again.
func (n *RESPNode) Close() {
	n.turn <- struct{}{}
	defer func() { <-n.turn }()
	if n.conn != nil {
		_ = n.conn.Close()
		n.conn = nil
	}
}

func (n *RESPNode) Run(ctx context.Context, calls []driver.Call) {
	if len(calls) > 0 {
		replies, err := n.roundTrip(ctx, commands(calls))
		settle(calls, replies, err)
	}
}

func (n *RESPNode) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	wait, err := nodekit.WaitCommand(w)
	if err != nil {
		nodekit.Fail(calls, err)
		return driver.Acks{}, err
	}
	replies, err := n.roundTrip(ctx, append(commands(calls), wait))
	settle(calls, replies, err)
	for _, c := range calls {
		if c.Err != nil {
			return driver.Acks{}, c.Err
		}
	}
	if err != nil {
		return driver.Acks{}, err
	}
	if e, ok := replies[len(calls)].(nodekit.ErrorReply); ok {
		return driver.Acks{}, e
	}
	return nodekit.ParseAcks(w, replies[len(calls)])
}

func (n *RESPNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, fmt.Errorf("%v: Watch: %w", n, errors.ErrUnsupported)
}

// commands returns the EVAL or EVALSHA command of each call.
func commands(calls []driver.Call) [][]string {
	cmds := make([][]string, len(calls))
	for i, c := range calls {
		cmd, script := "EVALSHA", c.SHA1
		if c.Source != "" {
			cmd, script = "EVAL", c.Source
		}
		cmds[i] = slices.Concat([]string{cmd, script, strconv.Itoa(len(c.Keys))}, c.Keys, c.Args)
	}
	return cmds
}

// settle sets each call's Reply or Err from its reply; calls whose reply
// did not arrive get err.
func settle(calls []driver.Call, replies []any, err error) {
	for i := range calls {
		if i >= len(replies) {
			calls[i].Reply, calls[i].Err = nil, err
		} else if e, ok := replies[i].(nodekit.ErrorReply); ok {
			calls[i].Reply, calls[i].Err = nil, nodekit.Reply(string(e), e)
		} else {
			calls[i].Reply, calls[i].Err = nodekit.Ints(replies[i])
		}
	}
}

// roundTrip sends cmds, pipelined, and reads their replies: all of them, or
// those that arrived before the error that stopped it.
func (n *RESPNode) roundTrip(ctx context.Context, cmds [][]string) ([]any, error) {
	select { // wait for our turn, or for ctx to end
	case n.turn <- struct{}{}:
		defer func() { <-n.turn }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n.conn == nil {
		var d net.Dialer
		dctx := ctx
		if n.bug == "DialIgnoresContext" {
			dctx = context.Background()
		}
		c, err := d.DialContext(dctx, "tcp", n.addr)
		if err != nil {
			return nil, err
		}
		n.conn, n.r = c, bufio.NewReader(c)
	}
	conn := n.conn
	deadline, _ := ctx.Deadline() // the zero time when there is none
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) }) // wakes a blocked read
	defer stop()

	var b []byte
	for _, argv := range cmds {
		b = nodekit.AppendCommand(b, argv...)
	}
	var replies []any
	_, err := conn.Write(b)
	for err == nil && len(replies) < len(cmds) {
		var v any
		if v, err = nodekit.ReadReply(n.r); err == nil {
			replies = append(replies, v)
		}
		if n.bug == "DeadlineOnlyUntilFirstReply" && len(replies) == 1 {
			stop()
			_ = conn.SetDeadline(time.Time{})
		}
	}
	keep := n.bug == "ReusesConnection" || n.bug == "KeepsPartReadConnection" && len(replies) > 0 ||
		n.bug == "KeepsWaitConnection" && len(replies) > 0 && cmds[len(cmds)-1][0] == "WAIT"
	if err != nil && !keep { // the connection may be out of step: drop it
		_ = conn.Close()
		n.conn = nil
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	}
	return replies, err
}

// The lines that run the suite on a driver, against a server the suite
// starts.
func TestRESPNode(t *testing.T) {
	t.Parallel() // its servers are its own
	harness.Run(t, func(t *testing.T, addr string) driver.Node {
		n := NewRESPNode(addr)
		t.Cleanup(n.Close)
		return n
	})
}

// The single-instance strategy runs correctly over it.
func TestRESPNodeSingle(t *testing.T) {
	t.Parallel() // its server is its own
	addr := harness.StartServer(t)
	node := NewRESPNode(addr)
	t.Cleanup(node.Close)
	topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: []string{addr}}
	newStrategy := func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) }
	conformance.RunStrategy(t, topology, newStrategy)
	family.Run(t, topology.Nodes, newStrategy)
}
