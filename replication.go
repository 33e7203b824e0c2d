package dlm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// A ReplicaWaiter is a Node that can run a script and then wait until
// replicas acknowledged the script's writes: it sends the script and then
// WAIT (or WAITAOF) on the same connection, pipelined, and returns both
// replies. The failover strategy requires it.
//
// WAIT counts the replicas that acknowledged the last write made on the
// connection it is sent on. Sent on any other connection it answers at once
// with the count for that connection's writes (none, or older ones): a false
// positive. An implementation must therefore send both commands on one
// connection, one after the other, with no command of another caller in
// between, and must not send them inside MULTI (WAIT does not block there).
//
// Both methods follow the Node contract (one round trip, no retry, ctx bounds
// the wait). When the script fails its error is returned (EvalSHAWait wraps
// NOSCRIPT with ErrNoScript) and the Acks are zero; when only the wait fails
// its error is returned with the script's reply, so the caller can undo the
// script's work.
type ReplicaWaiter interface {
	Node
	// EvalSHAWait runs EVALSHA and then w's command on the same connection.
	EvalSHAWait(ctx context.Context, w Wait, sha1 string, keys []string, args ...string) ([]int64, Acks, error)
	// EvalWait runs EVAL with the script's source and then w's command on the
	// same connection.
	EvalWait(ctx context.Context, w Wait, src string, keys []string, args ...string) ([]int64, Acks, error)
}

// A Wait says what to wait for after a script: WAIT numreplicas timeout, or,
// with AOF set, WAITAOF numlocal numreplicas timeout (Redis 7.2 and later).
type Wait struct {
	// Replicas is the number of replicas to wait for (numreplicas).
	Replicas int
	// Timeout bounds the wait on the server. It must be at least 1ms (a
	// WAIT timeout of 0 would block forever) and is rounded up to whole
	// milliseconds. It must stay below any read timeout of the client.
	Timeout time.Duration
	// AOF selects WAITAOF: replicas acknowledge once the write is fsynced
	// to their append-only file, not merely received.
	AOF bool
	// Local, with AOF, also waits for the primary's own fsync (numlocal 1).
	Local bool
}

// Command returns the command w stands for, for example
// ["WAIT", "2", "100"] or ["WAITAOF", "1", "2", "100"]. The error matches
// ErrInvalid when w is not valid.
func (w Wait) Command() ([]string, error) {
	switch {
	case w.Replicas < 0:
		return nil, invalidf("Wait: negative replica count %d", w.Replicas)
	case w.Timeout < time.Millisecond:
		return nil, invalidf("Wait: timeout %v is below 1ms (WAIT 0 blocks forever)", w.Timeout)
	case w.Local && !w.AOF:
		return nil, invalidf("Wait: Local needs AOF (WAIT has no local acknowledgement)")
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

// Acks is the reply of WAIT or WAITAOF.
type Acks struct {
	// Replicas is the number of replicas that acknowledged.
	Replicas int
	// Local reports, for WAITAOF, that the primary fsynced the write to its
	// append-only file. It is false after WAIT.
	Local bool
}

// ParseAcks converts the integer reply of w's command to Acks: one integer
// for WAIT, two (numlocal, numreplicas) for WAITAOF.
func (w Wait) ParseAcks(reply []int64) (Acks, error) {
	switch {
	case !w.AOF && len(reply) == 1:
		return Acks{Replicas: int(reply[0])}, nil
	case w.AOF && len(reply) == 2:
		return Acks{Local: reply[0] > 0, Replicas: int(reply[1])}, nil
	}
	cmd := "WAIT"
	if w.AOF {
		cmd = "WAITAOF"
	}
	return Acks{}, fmt.Errorf("dlm: unexpected reply %v to %s", reply, cmd)
}

// RunWait runs the script on n and then w's command on the same connection,
// with EVALSHA and, when the server does not have the script cached, once
// more with EVAL (the wait is then sent again after it).
func (s *Script) RunWait(ctx context.Context, n ReplicaWaiter, w Wait, keys []string, args ...string) ([]int64, Acks, error) {
	r, a, err := n.EvalSHAWait(ctx, w, s.SHA1(), keys, args...)
	if err != nil && errors.Is(err, ErrNoScript) {
		return n.EvalWait(ctx, w, s.src, keys, args...)
	}
	return r, a, err
}
