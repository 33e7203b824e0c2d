package strategy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
)

// ErrNodeTimeout is wrapped by the *nodeError of a node that did not
// reply within the per-node timeout. It does not match
// context.DeadlineExceeded, which is kept for the caller's own deadline.
var ErrNodeTimeout = errors.New("dlm: no reply within the per-node timeout")

// outcome is how one node answered one call of a quorum strategy.
type outcome int

const (
	// Pending: the node had not answered when the call's outcome was decided.
	outcomePending outcome = iota
	// Granted: the node acquired, extended or released the lock.
	outcomeGranted
	// Refused: another token holds the lock there (acquire), or the token
	// does not hold it there (extend, release).
	outcomeRefused
	// Failed: the call failed (an error, or no reply within the per-node
	// timeout); nodeResult.Err says why.
	outcomeFailed
)

func (o outcome) String() string {
	switch o {
	case outcomePending:
		return "pending"
	case outcomeGranted:
		return "granted"
	case outcomeRefused:
		return "refused"
	case outcomeFailed:
		return "failed"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// nodeResult is one node's answer to one call.
type nodeResult struct {
	Node    string // the node's name, see nodekit.Name
	Outcome outcome
	// Remaining is, for an acquisition refused because another token holds
	// the lock, the holder's remaining TTL on that node; negative when unknown.
	Remaining time.Duration
	// Quarantined reports a refusal by a node that lost the key's state and
	// grants nothing for Remaining more (see WithMaxTTL).
	Quarantined bool
	// Err is the *nodeError of a failed call.
	Err error
}

// quorumError reports a Redlock call that did not reach its quorum, with
// every node's answer. Use errors.As to get it.
//
// An acquisition's error matches dlm.ErrNotAcquired; when refusals kept it
// from the quorum it also holds a *heldError, and RetryAfter reports when
// enough holders' leases run out. An extension or release matches
// dlm.ErrNotHeld when a majority of nodes said the token does not hold the
// lock. A call cut short by its context matches the context's error and cause.
type quorumError struct {
	Op     string // "acquire", "extend" or "release"
	Key    string
	Quorum int          // the number of nodes that must agree
	Nodes  []nodeResult // one per node, in the strategy's order
	// Reason says why, when the node counts alone do not: the validity was
	// used up, the fence could not be written back to a majority, granting
	// nodes were not known yet to reach distinct servers, or the round
	// gave up on pending nodes (the quorum needed one whose last call timed
	// out).
	Reason string

	sentinel   error // dlm.ErrNotAcquired, dlm.ErrNotHeld or nil
	cause      error // the context's error and cause, when it ended
	held       *heldError
	retryAfter time.Duration // < 0 when unknown
}

// Permanent reports whether trying again cannot succeed: so many nodes
// failed with errors that waiting cannot cure (see dlm.Permanent) that the
// others can never form a quorum. One node with a wrong password among five
// is not permanent; three are. dlm.Permanent asks this method.
func (e *quorumError) Permanent() bool {
	bad := 0
	for _, r := range e.Nodes {
		if r.Outcome == outcomeFailed && dlm.Permanent(r.Err) {
			bad++
		}
	}
	return bad > len(e.Nodes)-e.Quorum
}

// Count returns how many nodes answered with o.
func (e *quorumError) Count(o outcome) int {
	n := 0
	for _, r := range e.Nodes {
		if r.Outcome == o {
			n++
		}
	}
	return n
}

// GrantedNodes returns how many nodes granted the call: a failed
// acquisition that some nodes granted is a split vote, which the
// simulations of internal/sim count (through an interface, as this type is
// not exported).
func (e *quorumError) GrantedNodes() int { return e.Count(outcomeGranted) }

// NodesWith returns the names of the nodes that answered with o.
func (e *quorumError) NodesWith(o outcome) []string {
	var s []string
	for _, r := range e.Nodes {
		if r.Outcome == o {
			s = append(s, r.Node)
		}
	}
	return s
}

func (e *quorumError) Error() string {
	var b strings.Builder
	if e.sentinel != nil {
		b.WriteString(e.sentinel.Error())
		b.WriteString(": ")
	} else {
		b.WriteString("dlm: ")
	}
	verb := map[string]string{"acquire": "granted", "extend": "extended", "release": "released"}[e.Op]
	fmt.Fprintf(&b, "redlock %s %q: %d of %d nodes %s, quorum %d", e.Op, e.Key, e.Count(outcomeGranted), len(e.Nodes), verb, e.Quorum)
	if e.Reason != "" {
		b.WriteString(", ")
		b.WriteString(e.Reason)
	}
	for _, o := range []outcome{outcomeGranted, outcomeRefused, outcomeFailed, outcomePending} {
		var parts []string
		for _, r := range e.Nodes {
			if r.Outcome != o {
				continue
			}
			switch {
			case o == outcomeFailed && r.Err != nil:
				var ne *nodeError
				if errors.As(r.Err, &ne) {
					parts = append(parts, ne.Node+" ("+errs.Cause(ne.Err)+")")
				} else {
					parts = append(parts, r.Node+" ("+errs.Cause(r.Err)+")")
				}
			case o == outcomeRefused && e.Op == "acquire" && r.Quarantined:
				parts = append(parts, fmt.Sprintf("%s (lost its data: quarantined for %v more)", r.Node, r.Remaining))
			case o == outcomeRefused && e.Op == "acquire" && r.Remaining >= 0:
				parts = append(parts, fmt.Sprintf("%s (held for %v more)", r.Node, r.Remaining))
			default:
				parts = append(parts, r.Node)
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(&b, "; %s: %s", o, strings.Join(parts, ", "))
		}
	}
	if e.cause != nil {
		b.WriteString("; ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

// Is reports whether target is the sentinel this error matches.
func (e *quorumError) Is(target error) bool { return e.sentinel != nil && target == e.sentinel }

// Unwrap returns the context's error and cause, the *heldError when
// refusals decided the outcome, and every node's error.
func (e *quorumError) Unwrap() []error {
	var errs []error
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	if e.held != nil {
		errs = append(errs, e.held)
	}
	for _, r := range e.Nodes {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return errs
}

// RetryAfter reports how long until enough holders' leases run out for an
// acquisition to reach the quorum, when the refusing nodes reported them.
func (e *quorumError) RetryAfter() (time.Duration, bool) {
	return e.retryAfter, e.retryAfter >= 0
}

// newQuorumError builds the error of a call that did not succeed.
// ctxErr is the context's error and cause when it ended (else nil).
func newQuorumError(op, key string, quorum int, nodes []nodeResult, sentinel, ctxErr error, reason string) *quorumError {
	e := &quorumError{Op: op, Key: key, Quorum: quorum, Nodes: nodes, Reason: reason, sentinel: sentinel, cause: ctxErr, retryAfter: -1}
	if op != "acquire" {
		return e
	}
	// Refusals kept the acquisition from the quorum when the nodes that did
	// not refuse are too few. Then report when enough leases end: the
	// need-th shortest remaining TTL among the refusing nodes.
	refused := e.Count(outcomeRefused)
	if refused == 0 || len(nodes)-refused >= quorum {
		return e
	}
	need := quorum - e.Count(outcomeGranted)
	var rem []time.Duration
	known := true
	for _, r := range nodes {
		if r.Outcome == outcomeRefused {
			if r.Remaining < 0 {
				known = false
			}
			rem = append(rem, r.Remaining)
		}
	}
	e.held = &heldError{Key: key, Remaining: -1}
	if known && need >= 1 && need <= len(rem) {
		slices.Sort(rem)
		e.retryAfter = rem[need-1]
		e.held.Remaining = e.retryAfter
	}
	return e
}

// contextError returns ctx's error joined with its cause, or nil while ctx is live.
func contextError(err, cause error) error {
	switch {
	case err == nil:
		return nil
	case cause == nil:
		return err
	case errors.Is(cause, err):
		return cause
	}
	return errors.Join(err, cause)
}

// ackError reports that fewer replicas acknowledged a write than the policy
// requires, within the wait timeout. For an acquisition it matches
// dlm.ErrNotAcquired and the lock was rolled back. For an extension it matches
// no sentinel: the primary keeps the new TTL, but only the lease from before
// the extension may be trusted.
type ackError struct {
	Op        string        // "acquire" or "extend"
	Key       string        // the lock's key
	Acked     int           // replicas that acknowledged
	Wanted    int           // replicas the policy required
	Connected int           // replicas the primary reported connected
	Policy    AckPolicy     // the policy
	Timeout   time.Duration // the wait timeout
	AOF       bool          // acknowledgements were fsyncs (WAITAOF)
	// LocalMissing reports that WithWaitAOF(true) was set and the primary
	// did not fsync the write in time.
	LocalMissing bool
}

func (e *ackError) Error() string {
	what := "acknowledged"
	if e.AOF {
		what = "fsynced"
	}
	msg := fmt.Sprintf("%d of %d replicas %s %q within %v (policy %v, %d connected)",
		e.Acked, e.Wanted, what, e.Key, e.Timeout, e.Policy, e.Connected)
	if e.LocalMissing {
		msg += "; the primary did not fsync it"
	}
	if e.Op == "acquire" {
		return "dlm: lock not acquired: " + msg + "; rolled back"
	}
	return "dlm: extension not trusted: " + msg + "; the previous lease stands"
}

// Is makes an acquisition's ackError match dlm.ErrNotAcquired.
func (e *ackError) Is(target error) bool { return target == dlm.ErrNotAcquired && e.Op == "acquire" }

// errReply reports a script reply of an unexpected shape.
func errReply(r []int64) error { return fmt.Errorf("dlm: unexpected script reply %v", r) }

// errNotHeld is the error of a call by a token that does not hold key on node.
func errNotHeld(key, node string) error {
	return fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, key, node)
}

// errRevoked is a renewal's error when the token's lock was revoked.
func errRevoked(key, node string) error {
	return fmt.Errorf("%w: %w: %q was revoked by an operator on %s", dlm.ErrNotHeld, dlm.ErrRevoked, key, node)
}
