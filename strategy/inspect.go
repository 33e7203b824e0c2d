package strategy

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/nodekit"
)

// What operators see and do (inspect.Inspector): every strategy reads a lock
// with inspect.lua and revokes it with revoke.lua, on each of its nodes.

var (
	inspectScript = mustScript("inspect.lua", "state.lua")
	revokeScript  = mustScript("revoke.lua", "state.lua", "announce.lua")
)

var (
	_ inspect.Inspector = (*single)(nil)
	_ inspect.Inspector = (*failover)(nil)
	_ inspect.Inspector = (*redlock)(nil)
)

// noteName returns the Redis key of the revocation note of the lock whose
// Redis key is lock: in the same hash slot (extend.lua builds it too).
func noteName(lock string) string { return lock + ":revoked" }

// stateKeys returns the keys of state.lua for key: the lock, its slot's
// fencing counter, its revocation note.
func stateKeys(key string) []string {
	lock := lockName(key)
	return []string{lock, fenceName(eval.Slot(lock)), noteName(lock)}
}

// Inspect implements inspect.Inspector.
func (s *single) Inspect(ctx context.Context, key string) ([]inspect.NodeState, error) {
	return operate(ctx, &s.cfg, []driver.Node{s.node}, []string{s.name}, key, inspectScript, nil)
}

// Revoke implements inspect.Inspector.
func (s *single) Revoke(ctx context.Context, key, by, reason string) ([]inspect.NodeState, error) {
	return operate(ctx, &s.cfg, []driver.Node{s.node}, []string{s.name}, key, revokeScript, []string{by, reason, publishArg(nodekit.RoutingOf(s.node))})
}

// Inspect implements inspect.Inspector, on the primary.
func (f *failover) Inspect(ctx context.Context, key string) ([]inspect.NodeState, error) {
	return operate(ctx, &f.cfg, []driver.Node{f.node}, []string{f.name}, key, inspectScript, nil)
}

// Revoke implements inspect.Inspector, on the primary; it does not wait for
// replicas (a promoted replica that missed it still holds the lock until
// its TTL, as after a release).
func (f *failover) Revoke(ctx context.Context, key, by, reason string) ([]inspect.NodeState, error) {
	return operate(ctx, &f.cfg, []driver.Node{f.node}, []string{f.name}, key, revokeScript, []string{by, reason, publishArg(nodekit.RoutingOf(f.node))})
}

// Inspect implements inspect.Inspector: every master is asked at once.
func (s *redlock) Inspect(ctx context.Context, key string) ([]inspect.NodeState, error) {
	return operate(ctx, &s.cfg, s.nodes, s.names, key, inspectScript, nil)
}

// Revoke implements inspect.Inspector: the lock is revoked on every master
// that answers.
func (s *redlock) Revoke(ctx context.Context, key, by, reason string) ([]inspect.NodeState, error) {
	return operate(ctx, &s.cfg, s.nodes, s.names, key, revokeScript, []string{by, reason, s.publish})
}

// operate runs script (inspect or revoke) for key on every node at once,
// each within the per-node timeout, and decodes each node's state.
func operate(ctx context.Context, c *config, nodes []driver.Node, names []string, key string, script *eval.Script, args []string) ([]inspect.NodeState, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	for _, a := range args[:min(len(args), 2)] {
		if len(a) > inspect.MaxRevokeReasonLen || strings.Contains(a, "\n") {
			return nil, fmt.Errorf("%w: revoke: by and reason must be one line of at most %d bytes", dlm.ErrInvalid, inspect.MaxRevokeReasonLen)
		}
	}
	keys := stateKeys(key)
	out := make([]inspect.NodeState, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			cctx, cancel := c.withTimeout(ctx)
			defer cancel()
			r, err := script.Run(cctx, n, keys, args...)
			out[i] = decodeState(names[i], r, err)
		})
	}
	wg.Wait()
	return out, nil
}

// decodeState reads state.lua's reply.
func decodeState(node string, r []int64, err error) inspect.NodeState {
	st := inspect.NodeState{Node: node}
	value, note, ok := "", "", len(r) >= 5
	if ok {
		var rest []int64
		value, rest, ok = text(r[3:])
		if ok {
			note, rest, ok = text(rest)
			ok = ok && len(rest) == 0
		}
	}
	switch {
	case err != nil:
		st.Err = err
		return st
	case !ok:
		st.Err = errReply(r[:min(len(r), 8)])
		return st
	}
	if r[0] >= 0 || r[0] == -1 {
		if i := strings.IndexByte(value, ':'); i >= 0 {
			fence, _ := strconv.ParseUint(value[:i], 10, 64)
			st.Token, st.Fence = value[i+1:], fence
		}
		st.TTL = time.Duration(max(r[0], 0)) * time.Millisecond
	}
	st.Counter, st.Waiters = uint64(max(r[1], 0)), int(r[2])
	if parts := strings.SplitN(note, "\n", 4); len(parts) == 4 {
		ms, _ := strconv.ParseInt(parts[1], 10, 64)
		st.Revoked = &inspect.Revocation{Token: parts[0], At: time.UnixMilli(ms), By: parts[2], Reason: parts[3]}
	}
	return st
}

// text reads a length-prefixed string of bytes from r.
func text(r []int64) (s string, rest []int64, ok bool) {
	if len(r) == 0 || r[0] < 0 || int64(len(r)-1) < r[0] {
		return "", nil, false
	}
	n := int(r[0])
	b := make([]byte, n)
	for i, v := range r[1 : 1+n] {
		if v < 0 || v > 255 {
			return "", nil, false
		}
		b[i] = byte(v)
	}
	return string(b), r[1+n:], true
}

// KeyOf returns the lock key whose lock lives in the Redis key name, the
// inverse of Keys' lock: ok is false for a name that is no lock's, such as
// a fencing counter or a revocation note. For listing locks (SCAN MATCH
// LockPattern), not for writing to them.
func KeyOf(name string) (key string, ok bool) {
	switch {
	case strings.HasPrefix(name, "dlm:x:{") && strings.HasSuffix(name, "}"):
		b, err := hex.DecodeString(name[len("dlm:x:{") : len(name)-1])
		key = string(b)
		ok = err == nil
	case strings.HasPrefix(name, "dlm:t:"):
		key, ok = name[len("dlm:t:"):], true
	case strings.HasPrefix(name, "dlm:{") && strings.HasSuffix(name, "}"):
		key, ok = name[len("dlm:{"):len(name)-1], true
	}
	if !ok || checkKey(key) != nil || lockName(key) != name {
		return "", false
	}
	return key, true
}

// LockPattern is a SCAN MATCH pattern that every lock's Redis key matches
// (among others: check each with KeyOf).
const LockPattern = "dlm:*"
