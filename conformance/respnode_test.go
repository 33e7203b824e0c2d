package conformance_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// RESPNode is a complete dlm.Node over one TCP connection, speaking RESP
// with nothing but the standard library: the smallest driver that passes
// conformance.RunNode. Calls take turns on the connection.
type RESPNode struct {
	addr string
	turn chan struct{} // holds a token while a call uses the connection
	conn net.Conn      // nil until dialed, and after a call left it out of step
	r    *bufio.Reader
}

func NewRESPNode(addr string) *RESPNode {
	return &RESPNode{addr: addr, turn: make(chan struct{}, 1)}
}

func (n *RESPNode) String() string { return "resp(" + n.addr + ")" }

func (n *RESPNode) EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	return n.do(ctx, "EVALSHA", sha1, keys, args)
}

func (n *RESPNode) Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	return n.do(ctx, "EVAL", src, keys, args)
}

// An errorReply is an error the server sent; the connection stays in step.
type errorReply string

func (e errorReply) Error() string { return string(e) }

func (n *RESPNode) do(ctx context.Context, cmd, script string, keys, args []string) ([]int64, error) {
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
		c, err := d.DialContext(ctx, "tcp", n.addr)
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

	r, err := n.roundTrip(slices.Concat([]string{cmd, script, strconv.Itoa(len(keys))}, keys, args))
	var reply errorReply
	if errors.As(err, &reply) {
		if strings.HasPrefix(string(reply), "NOSCRIPT") {
			return nil, fmt.Errorf("%w: %w", dlm.ErrNoScript, err)
		}
		return nil, err
	}
	if err != nil { // the connection may be out of step: drop it
		_ = conn.Close()
		n.conn = nil
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
	}
	return r, err
}

// roundTrip sends one command and reads an array of integers.
func (n *RESPNode) roundTrip(argv []string) ([]int64, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(argv))
	for _, a := range argv {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := n.conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	kind, line, err := n.line()
	if err != nil {
		return nil, err
	}
	if kind == '-' {
		return nil, errorReply(line)
	}
	count, err := strconv.Atoi(line)
	if kind != '*' || err != nil || count < 0 {
		return nil, fmt.Errorf("script replied %c%s, want an array of integers", kind, line)
	}
	out := make([]int64, count)
	for i := range out {
		kind, line, err := n.line()
		if err != nil {
			return nil, err
		}
		if out[i], err = strconv.ParseInt(line, 10, 64); kind != ':' || err != nil {
			return nil, fmt.Errorf("script reply element %d is %c%s, want an integer", i, kind, line)
		}
	}
	return out, nil
}

// line reads one RESP line: its type byte and the rest, without CRLF.
func (n *RESPNode) line() (byte, string, error) {
	s, err := n.r.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	s = strings.TrimSuffix(s, "\r\n")
	if s == "" {
		return 0, "", errors.New("empty RESP line")
	}
	return s[0], s[1:], nil
}

// The three lines that run the suite on a driver.
func TestRESPNode(t *testing.T) {
	addr := redistest.Start(t).Addr
	conformance.RunNode(t, func(t *testing.T) dlm.Node { return NewRESPNode(addr) })
}

// The single-instance strategy runs correctly over it.
func TestRESPNodeSingle(t *testing.T) {
	addr := redistest.Start(t).Addr
	conformance.RunStrategy(t,
		conformance.Topology{Nodes: func(*testing.T) []dlm.Node { return []dlm.Node{NewRESPNode(addr)} }},
		func(nodes []dlm.Node) (dlm.Strategy, error) { return strategy.NewSingle(nodes[0]) })
}
