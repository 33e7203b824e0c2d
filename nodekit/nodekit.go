// Package nodekit is a kit for driver authors: what drivers (and wrappers
// of a driver.Node, such as dlmotel's) share and users of dlm do not call:
// how a node routes its calls (Router), the text of WAIT commands and of
// error replies, the Hub that gives a driver Node.Watch over a
// minimal pub/sub connection, the Endpoint a driver's Dial takes, Dial,
// which connects a client over TLS or plain text and reports TLS problems
// as permanent errors, and the whole of a driver.Node for a client that
// pipelines typed commands (PipeNode over a Pipe and a Receiver: rueidis,
// valkey-go). It imports dlm and the standard library only.
package nodekit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// Name names n for errors and logs: its String method when it has one,
// otherwise its position among the nodes of a strategy.
func Name(n driver.Node, index int) string {
	if s, ok := n.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("node[%d]", index)
}

// Fail sets err on every call that has neither a Reply nor an Err: a driver
// calls it when a batch stops before all replies arrived.
func Fail(calls []driver.Call, err error) {
	for i := range calls {
		if calls[i].Reply == nil && calls[i].Err == nil {
			calls[i].Err = err
		}
	}
}

// RunGroups runs each group of calls (indices into calls) with run, all
// groups side by side, each on a copy of its calls that is written back
// when run returns, and returns when every group has. Drivers split a
// Cluster batch with it, one group per master or slot, so that a master
// that stalls past the context does not take the others' replies with it.
func RunGroups(calls []driver.Call, groups [][]int, run func(part []driver.Call)) {
	var wg sync.WaitGroup
	for _, idx := range groups {
		wg.Go(func() {
			part := make([]driver.Call, len(idx))
			for j, i := range idx {
				part[j] = calls[i]
			}
			run(part)
			for j, i := range idx {
				calls[i] = part[j] // each group writes its own calls
			}
		})
	}
	wg.Wait()
}

// Reply returns a client's error reply as a *driver.ReplyError wrapping err,
// the client's error: text is the reply as the client words it, code
// first. A text whose first word is not a code in capitals (or is AUTH or
// DB, which begin ERR replies' messages: "AUTH <password> called without
// …", "DB index is out of range") is taken as code ERR with text the
// message: the form of a client that strips "ERR " (rueidis does).
//
// A server before Redis 7.0 wraps the error reply of a command a script
// called in one of its own: "ERR Error running script (call to f_<sha1>):
// @user_script:<line>: WRONGTYPE Operation against …". Such a reply is
// read as the command's (code WRONGTYPE), as Redis 7.0 replies it, so that
// dlm.Permanent classifies it alike on every server.
func Reply(text string, err error) *driver.ReplyError {
	code, msg, _ := strings.Cut(text, " ")
	if !isCode(code) || code == "AUTH" || code == "DB" {
		code, msg = "ERR", text
	}
	if code == "ERR" {
		if c, m, ok := scriptCallError(msg); ok {
			code, msg = c, m
		}
	}
	return &driver.ReplyError{Code: code, Message: msg, Err: err}
}

// scriptCallError returns the code and message of the command's reply in
// msg, the message of a pre-7.0 server's ERR reply to a script whose
// redis.call met an error reply.
func scriptCallError(msg string) (code, inner string, ok bool) {
	rest, ok := strings.CutPrefix(msg, "Error running script (call to f_")
	if !ok {
		return "", "", false
	}
	if _, rest, ok = strings.Cut(rest, "): @user_script:"); !ok {
		return "", "", false
	}
	line, rest, ok := strings.Cut(rest, ": ")
	if !ok || line == "" || strings.Trim(line, "0123456789") != "" {
		return "", "", false
	}
	code, inner, _ = strings.Cut(rest, " ")
	if !isCode(code) {
		return "", "", false // a Lua error, not a command's reply
	}
	return code, inner, true
}

// isCode reports whether w is a word in capitals (digits and _ allowed
// after the first letter).
func isCode(w string) bool {
	for i, r := range w {
		if !('A' <= r && r <= 'Z' || i > 0 && (r == '_' || '0' <= r && r <= '9')) {
			return false
		}
	}
	return w != ""
}

// Ints converts a script's reply, as clients that decode RESP to Go values
// give it (an int64, or an []any of int64), to []int64: an integer n is
// []int64{n}.
func Ints(v any) ([]int64, error) {
	if n, ok := v.(int64); ok {
		return []int64{n}, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("dlm: script replied %T, want an integer or an array of integers", v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		x, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("dlm: script reply element %d is %T, want an integer", i, e)
		}
		out[i] = x
	}
	return out, nil
}

// WaitCommand returns the command w stands for, for example
// ["WAIT", "2", "100"] or ["WAITAOF", "1", "2", "100"]. The error matches
// dlm.ErrInvalid when w is not valid.
func WaitCommand(w driver.Wait) ([]string, error) {
	switch {
	case w.Replicas < 0:
		return nil, fmt.Errorf("%w: Wait: negative replica count %d", driver.ErrInvalid, w.Replicas)
	case w.Timeout < time.Millisecond:
		return nil, fmt.Errorf("%w: Wait: timeout %v is below 1ms (WAIT 0 blocks forever)", driver.ErrInvalid, w.Timeout)
	case w.Local && !w.AOF:
		return nil, fmt.Errorf("%w: Wait: Local needs AOF (WAIT has no local acknowledgement)", driver.ErrInvalid)
	}
	ms := strconv.FormatInt(int64((w.Timeout+time.Millisecond-1)/time.Millisecond), 10)
	n := strconv.Itoa(w.Replicas)
	if !w.AOF {
		return []string{"WAIT", n, ms}, nil
	}
	local := "0"
	if w.Local {
		local = "1"
	}
	return []string{"WAITAOF", local, n, ms}, nil
}

// ParseAcks converts the reply of w's command to Acks: one integer for
// WAIT, an array of two (numlocal, numreplicas) for WAITAOF, as clients that
// decode RESP to Go values give them (int64, []any of int64).
func ParseAcks(w driver.Wait, v any) (driver.Acks, error) {
	switch r := v.(type) {
	case int64:
		if !w.AOF {
			return driver.Acks{Replicas: int(r)}, nil
		}
	case []any:
		if x, err := Ints(r); err == nil && w.AOF && len(x) == 2 {
			return driver.Acks{Local: x[0] > 0, Replicas: int(x[1])}, nil
		}
	}
	cmd := "WAIT"
	if w.AOF {
		cmd = "WAITAOF"
	}
	return driver.Acks{}, fmt.Errorf("dlm: unexpected reply %v to %s", v, cmd)
}

// Routing says where a Node sends calls, so that dlm may run several calls
// in one script invocation: a script can only touch keys of the server it
// runs on.
type Routing int

const (
	// RoutingUnknown: calls may go to different servers by rules dlm does
	// not know (a client-side sharding ring, a proxy). Calls are never
	// merged.
	RoutingUnknown Routing = iota
	// RoutingOneServer: every call goes to one server (a primary, followed
	// through failovers, counts as one). Any calls may be merged.
	RoutingOneServer
	// RoutingBySlot: a Redis Cluster client; a call goes to the master of
	// its first key's hash slot. Calls of one slot may be merged.
	RoutingBySlot
)

// A Router is a Node that says how it routes calls. A Node that is not a
// Router counts as RoutingUnknown; so does a wrapper of a Router that does
// not implement Router itself.
type Router interface {
	Routing() Routing
}

// RoutingOf returns n's Routing.
func RoutingOf(n driver.Node) Routing {
	if r, ok := n.(Router); ok {
		return r.Routing()
	}
	return RoutingUnknown
}

// A Batch is what a layer that merges several callers' calls into one Run
// (the strategies' coalescing) puts in the Run's context under BatchKey,
// so that a Node wrapper (metrics, tracing) can tell each caller its part.
type Batch interface {
	// Callers calls f, in order, for each caller whose calls the Run
	// carries, with the caller's context (which may have ended), how many
	// of its calls the Run carries, and the indexes, in the Run's calls,
	// of the calls that carry them.
	Callers(f func(ctx context.Context, own int, calls []int))
}

// BatchKey is the context key of a Run's Batch.
type BatchKey struct{}

// BatchOf returns the Batch of a Run's context, if a coalescing layer made
// the Run.
func BatchOf(ctx context.Context) (Batch, bool) {
	b, ok := ctx.Value(BatchKey{}).(Batch)
	return b, ok
}
