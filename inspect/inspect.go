// Package inspect is the operator's view of dlm's locks: who holds a key,
// since when, for how much longer, how many processes wait ([Key]), and
// taking a stuck lock away from its holder ([Revoke]). Every strategy of
// package strategy is an [Inspector]; the dlm command's inspect, ls and
// revoke subcommands are built on this package.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/token"
)

// MaxRevokeReasonLen bounds the who and why of a revocation, in bytes each.
const MaxRevokeReasonLen = 256

// An Inspector is a strategy that can read what its nodes hold for a lock,
// without changing it, and revoke a lock. Every strategy of package
// strategy is one; Key and Revoke need it.
type Inspector interface {
	// Inspect reads key's lock on every node, one entry per node in the
	// strategy's order. A node that did not answer has Err set.
	Inspect(ctx context.Context, key string) ([]NodeState, error)
	// Revoke deletes key's lock whoever holds it, advances its fencing
	// counter (so the next holder's fence is above the revoked one's by at
	// least two) and leaves a note naming the revoked token, by and reason,
	// which the revoked holder's next renewal finds: that renewal fails with
	// dlm.ErrRevoked. The note expires a minute after the revoked lease
	// would have. Waiters are woken as by a release. It returns what each
	// node held before, as Inspect would have.
	Revoke(ctx context.Context, key, by, reason string) ([]NodeState, error)
}

// A NodeState is what one node holds for a lock.
type NodeState struct {
	// Node names the node.
	Node string
	// Err is set when the node did not answer; the other fields are then
	// zero.
	Err error
	// Token is the holder's token (HolderOf reads who that is), empty when
	// the node holds no lock on the key.
	Token string
	// Fence is the lock's fencing token.
	Fence uint64
	// TTL is the lock's remaining time to live on the node.
	TTL time.Duration
	// Counter is the node's fencing counter for the key: the fence of the
	// latest acquisition there, or more.
	Counter uint64
	// Waiters is the number of client processes subscribed to the key's
	// release notifications: each Manager that has Lock calls waiting for
	// the key counts once (a Manager that polls, because its nodes cannot
	// notify, is not seen).
	Waiters int
	// Revoked is the last revocation of the key, while its note lasts.
	Revoked *Revocation
}

// A Revocation records an operator's Revoke.
type Revocation struct {
	Token  string    // the token that held the lock
	At     time.Time // when, by the node's clock
	By     string    // who revoked it
	Reason string    // why
}

// Info is what Key found for a lock.
type Info struct {
	Key string
	// Held reports that a majority of the nodes (the node, for one-node
	// strategies) hold the lock for one token.
	Held bool
	// Token, Fence and Holder are those of that majority's lock; HolderOK
	// is false when the token was not made by a dlm.Manager of this version.
	Token    string
	Fence    uint64
	Holder   Holder
	HolderOK bool
	// Remaining is the least remaining TTL among the nodes that hold it.
	Remaining time.Duration
	// Waiters is the most waiting processes any node counts.
	Waiters int
	// Nodes is each node's answer.
	Nodes []NodeState
}

// A Holder says who took a lock, as its token carries it (HolderOf).
type Holder struct {
	// Owner is the holder's dlm.WithOwner string.
	Owner string
	// Since is when the acquisition that took the lock began, read from
	// the holder's wall clock (to the millisecond).
	Since time.Time
	// TTL is the lease TTL the lock was taken with; renewals reset the
	// servers' TTL to it (Lock.Extend may choose another).
	TTL time.Duration
}

// HolderOf reads who took a lock from its token (dlm.Lock.Token, or what
// Key found on the servers). ok is false for a token that a dlm.Manager of
// this version did not make.
func HolderOf(tok string) (h Holder, ok bool) {
	owner, since, ttl, ok := token.Parse(tok)
	if !ok {
		return Holder{}, false
	}
	return Holder{Owner: owner, Since: since, TTL: ttl}, true
}

// Key reports who holds key, since when and for how much longer, what
// each node holds and how many processes wait, without changing anything.
// s must be an Inspector (errors.ErrUnsupported otherwise). A node that
// does not answer is reported in Info.Nodes; when none answers the error
// says why.
func Key(ctx context.Context, s driver.Strategy, key string) (Info, error) {
	in, err := inspector(s, key)
	if err != nil {
		return Info{}, err
	}
	nodes, err := in.Inspect(ctx, key)
	if err != nil {
		return Info{}, err
	}
	if errs := nodeErrors(nodes); len(errs) == len(nodes) {
		return Info{}, fmt.Errorf("dlm: inspect %q: no node answered: %w", key, errors.Join(errs...))
	}
	return Summarize(key, nodes), nil
}

// Revoke takes key's lock away from whoever holds it, through s, which
// must be an Inspector: see Inspector.Revoke. by and reason (who asks, and
// why) are recorded beside the key for the holder and for Key; each is at
// most MaxRevokeReasonLen bytes, one line each. It returns what was held
// before; when a majority of the nodes answered and nothing was held on a
// majority the error matches dlm.ErrNotHeld; when fewer answered, whether
// a lock was held is unknown and the error (dlm.ErrStateUnknown) says so.
// Either is joined with the errors of the nodes that did not answer.
func Revoke(ctx context.Context, s driver.Strategy, key, by, reason string) (Info, error) {
	in, err := inspector(s, key)
	if err != nil {
		return Info{}, err
	}
	if len(by) > MaxRevokeReasonLen || len(reason) > MaxRevokeReasonLen {
		return Info{}, fmt.Errorf("%w: Revoke: by and reason must be at most %d bytes each", dlm.ErrInvalid, MaxRevokeReasonLen)
	}
	nodes, err := in.Revoke(ctx, key, by, reason)
	if err != nil {
		return Info{}, err
	}
	info := Summarize(key, nodes)
	if !info.Held {
		errs := nodeErrors(nodes)
		err := fmt.Errorf("%w: %q: no lock held on a majority of the nodes to revoke", dlm.ErrNotHeld, key)
		if answered := len(nodes) - len(errs); answered < len(nodes)/2+1 {
			err = fmt.Errorf("%w: revoke %q: %d of %d nodes answered, fewer than a majority: whether a lock was held, and whether it was revoked, is unknown", dlm.ErrStateUnknown, key, answered, len(nodes))
		}
		return info, errors.Join(append([]error{err}, errs...)...)
	}
	return info, nil
}

// nodeErrors returns the errors of the nodes that did not answer, each
// naming its node.
func nodeErrors(nodes []NodeState) []error {
	var errs []error
	for _, n := range nodes {
		if n.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Node, n.Err))
		}
	}
	return errs
}

func inspector(s driver.Strategy, key string) (Inspector, error) {
	switch {
	case key == "":
		return nil, fmt.Errorf("%w: empty key", dlm.ErrInvalid)
	case len(key) > dlm.MaxKeyLen:
		return nil, fmt.Errorf("%w: key of %d bytes is longer than MaxKeyLen (%d)", dlm.ErrInvalid, len(key), dlm.MaxKeyLen)
	}
	in, ok := s.(Inspector)
	if !ok {
		return nil, fmt.Errorf("dlm: the strategy %T cannot inspect or revoke locks: %w", s, errors.ErrUnsupported)
	}
	return in, nil
}

// Summarize combines what each node holds for key into an Info: the lock is
// held when a majority of the nodes hold it for one token.
func Summarize(key string, nodes []NodeState) Info {
	info := Info{Key: key, Nodes: nodes}
	count := map[string]int{}
	for _, n := range nodes {
		info.Waiters = max(info.Waiters, n.Waiters)
		if n.Err == nil && n.Token != "" {
			count[n.Token]++
		}
	}
	for tok, c := range count {
		if c < len(nodes)/2+1 {
			continue
		}
		info.Held, info.Token = true, tok
		info.Holder, info.HolderOK = HolderOf(tok)
		for _, n := range nodes {
			if n.Err == nil && n.Token == tok {
				info.Fence = max(info.Fence, n.Fence)
				if info.Remaining == 0 || n.TTL < info.Remaining {
					info.Remaining = n.TTL
				}
			}
		}
	}
	return info
}
