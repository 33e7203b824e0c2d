package strategy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/runner"
	"github.com/dlmgo/dlm/nodekit"
)

// Redlock's per-node timeout without WithTimeout: it adapts to the nodes'
// latency between defaultNodeTimeout and maxNodeTimeout (see NewRedlock).
const (
	defaultNodeTimeout = 50 * time.Millisecond
	maxNodeTimeout     = 500 * time.Millisecond
)

// redlock is the strategy NewRedlock returns.
type redlock struct {
	nodes    []driver.Node
	queues   []*eval.Node // queues[i] is nodes[i], its coalescing layer; nil without coalescing
	names    []string
	quorum   int
	all      []int // 0, 1, …, N−1: every node
	cfg      config
	flights  flights
	slow     []atomic.Bool // node i's last call ran into the per-node timeout
	publish  string        // announce.lua's mode, shared by every node; "" when they differ
	latency  latency
	distinct distinct
	workers  *runner.Pool[job] // run a round's node calls
	lingers  sync.Pool         // of stopped *time.Timer, for round.linger
}

var _ driver.Handoff = (*redlock)(nil)

// NewRedlock returns the Redlock strategy over nodes, which must be distinct
// independent masters (not replicas of each other): no nil node, no node
// given twice (the same value, or the same name as reported by
// nodekit.Name). Two nodes that reach one server under different names (two
// clients of one server, of one Cluster, of one Sentinel-managed primary)
// are found at first use, when every node is asked for its server's run_id
// (nodes that did not answer are asked again, at most once a second, until
// each has; a server that cannot tell is not asked again): from then on
// Acquire fails with an error matching dlm.ErrInvalid. Options: WithTimeout
// (a fixed per-node timeout), WithDriftFactor, WithMaxTTL, WithCoalescing.
//
// Without WithTimeout the per-node timeout adapts: twice the typical
// latency of the quorum-th fastest node (an average of its recent replies;
// a call that times out raises it by half), at least defaultNodeTimeout and
// at most maxNodeTimeout or, for an acquisition or extension, a quarter of
// the TTL. So a slow majority is waited for instead of failed on every
// call, and a silent minority costs no more than the fast majority's pace.
//
// It locks over N independent Redis masters with the Redlock algorithm:
// a call goes to all nodes in parallel, each bounded by the per-node timeout,
// and succeeds only when a majority (⌊N/2⌋+1) of them agree.
//
// An acquisition is valid for TTL − elapsed − drift, where elapsed is the
// time the calls took (on the monotonic clock) and drift is TTL×factor + 2ms;
// it fails when that is not positive. A failed acquisition releases the lock
// on every node, including those whose reply was lost or came too late. An
// extension follows the same quorum and validity rule. A release goes to
// every node.
//
// Fencing: each node keeps a counter per hash slot (see the package
// documentation), advanced when it grants the lock. The fence is the largest counter among the granting majority, written
// back (counter = max(counter, fence)) until a majority holds at least it
// before the lease is handed out; the write-back round is skipped when a
// majority already does, which is the usual case. Any two majorities share a
// node, so an acquisition that begins after another completed sees a larger
// counter and gets a larger fence, even when the two used different
// majorities. This needs counters that never go back: run the nodes with
// persistence that survives a crash (appendonly yes, appendfsync always), or
// seed a node that lost its data with the counters of a majority before it
// rejoins. The mutual exclusion of Redlock itself rests on every node that
// granted a lock keeping it: its data (or the amnesia guard) and a clock
// within the drift margin. One node of a bare majority that frees the lock
// early lets another client win it through that node and the nodes the
// holder never had.
//
// Acquiring again with the token that holds the lock refreshes it on every
// node and returns the same fence.
func NewRedlock(nodes []driver.Node, opts ...Option) (driver.Strategy, error) {
	if len(nodes) == 0 {
		return nil, errs.Within("strategy.NewRedlock", fmt.Errorf("%w: no nodes", dlm.ErrInvalid))
	}
	s := &redlock{
		nodes:   append([]driver.Node(nil), nodes...),
		names:   make([]string, len(nodes)),
		all:     make([]int, len(nodes)),
		quorum:  len(nodes)/2 + 1,
		cfg:     defaultConfig(),
		slow:    make([]atomic.Bool, len(nodes)),
		workers: runner.New(runJob),
	}
	s.latency.est = make([]atomic.Int64, len(nodes))
	s.cfg.timeout = defaultNodeTimeout
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if isNil(n) {
			return nil, errs.Within("strategy.NewRedlock", fmt.Errorf("%w: nodes[%d] is nil", dlm.ErrInvalid, i))
		}
		for j := range i {
			if sameNode(nodes[j], n) {
				return nil, errs.Within("strategy.NewRedlock", fmt.Errorf("%w: nodes[%d] and nodes[%d] are the same node", dlm.ErrInvalid, j, i))
			}
		}
		s.all[i], s.names[i] = i, nodekit.Name(n, i)
		if j, ok := seen[s.names[i]]; ok {
			return nil, errs.Within("strategy.NewRedlock", fmt.Errorf("%w: nodes[%d] and nodes[%d] are both %s", dlm.ErrInvalid, j, i, s.names[i]))
		}
		seen[s.names[i]] = i
	}
	if err := applyOptions(&s.cfg, opts); err != nil {
		return nil, errs.Within("strategy.NewRedlock", err)
	}
	if s.cfg.timeout <= 0 {
		return nil, errs.Within("strategy.NewRedlock", fmt.Errorf("%w: the per-node timeout (WithTimeout) must be positive", dlm.ErrInvalid))
	}
	s.publish = publishArg(nodekit.RoutingOf(s.nodes[0]))
	for i, n := range s.nodes {
		if publishArg(nodekit.RoutingOf(n)) != s.publish {
			s.publish = "" // the release script asks each server
		}
		if q := s.cfg.coalescing(n); q != nil {
			s.queues = append(s.queues, q)
			s.nodes[i] = q
		}
	}
	return s, nil
}

// sameNode reports whether a and b are equal values; values that cannot be
// compared (== would panic) are not the same.
func sameNode(a, b driver.Node) (same bool) {
	if ta := reflect.TypeOf(a); ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false // an interface field holds an uncomparable value
		}
	}()
	return a == b
}

// Quorum returns the number of nodes that must agree: ⌊N/2⌋+1.
func (s *redlock) Quorum() int { return s.quorum }

// Nodes returns the names of the nodes, in order.
func (s *redlock) Nodes() []string { return append([]string(nil), s.names...) }

// Timeout returns the per-node timeout a call without a TTL would use now.
func (s *redlock) Timeout() time.Duration { return s.nodeTimeout(0) }

// results returns one outcomePending result per node.
func (s *redlock) results() []nodeResult {
	return s.resultsIn(make([]nodeResult, len(s.nodes)))
}

// resultsIn is results, in res (of one per node).
func (s *redlock) resultsIn(res []nodeResult) []nodeResult {
	for i := range res {
		res[i] = nodeResult{Node: s.names[i], Remaining: -1}
	}
	return res
}

// fail returns the *quorumError of a call that did not succeed.
func (s *redlock) fail(ctx context.Context, op, key string, res []nodeResult, sentinel error, reason string) error {
	return newQuorumError(op, key, s.quorum, res, sentinel, contextError(ctx.Err(), context.Cause(ctx)), reason)
}

// lease returns the lease of a call of the given TTL that began at start,
// or why its validity is used up.
func (s *redlock) lease(fence int64, start time.Time, ttl time.Duration) (driver.Lease, string) {
	until := start.Add(ttl - s.cfg.driftMargin(ttl))
	if now := time.Now(); !now.Before(until) {
		return driver.Lease{}, fmt.Sprintf("validity used up: the calls took %v of the %v TTL (drift margin %v)", now.Sub(start).Round(time.Microsecond), ttl, s.cfg.driftMargin(ttl))
	}
	return driver.Lease{Fence: uint64(fence), Until: until}, ""
}

// Acquire implements driver.Strategy. The error of a failed acquisition matches
// dlm.ErrNotAcquired and is a *quorumError.
func (s *redlock) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	return s.acquire(ctx, key, token, "", ttl)
}

// Handoff implements driver.Handoff: an acquisition by to in which each node
// replaces from's lock by to's, and grants nothing where from does not hold
// the key. On success from's lock is released, in the background, on the
// nodes that did not hand it off. When a majority refused (from does not
// hold the key there) the error matches dlm.ErrNotHeld too.
func (s *redlock) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	if err := checkHandoff(from, to); err != nil {
		return driver.Lease{}, err
	}
	return s.acquire(ctx, key, to, from, ttl)
}

// acquire is Acquire, or with from set Handoff.
func (s *redlock) acquire(ctx context.Context, key, token, from string, ttl time.Duration) (driver.Lease, error) {
	op := "acquire"
	if from != "" {
		op = "handoff"
	}
	if err := s.cfg.checkCall(key, token, ttl, true); err != nil {
		return driver.Lease{}, err
	}
	// The lease counts from the call's start, before the probe and the wait
	// for releases: a caller's own clock starts no later.
	start := time.Now()
	if err := s.checkDistinct(ctx); err != nil {
		return driver.Lease{}, err
	}
	if s.flights.waitReleases(ctx, key, token); ctx.Err() != nil {
		return driver.Lease{}, s.fail(ctx, op, key, s.results(), dlm.ErrNotAcquired, "")
	}
	keys, args := acquireCall(key, token, from, ttl, s.cfg.maxTTL)
	counters := make([]int64, len(s.nodes))
	r := s.round(ctx, op, acquireScript, []driver.Call{{Keys: keys, Args: args}}, s.all, s.nodeTimeout(ttl), judgeGrant(counters))
	t := &r.t[0]
	gaveUp := s.collectGrants(ctx, r)
	reason := ""
	if t.n(outcomeGranted) >= s.quorum {
		lease, why, err := s.confirm(ctx, r, keys, token, counters, start, ttl)
		switch {
		case err != nil:
			s.undo(ctx, key, token, t.res, r, start.Add(ttl))
			return driver.Lease{}, err
		case why == "":
			if uncertain := timedOutNodes(t.res); r.left > 0 || len(uncertain) > 0 {
				// Late grants are ours; a Release that comes before them
				// has them released as they arrive, and has the nodes
				// that timed out settled (see drain).
				s.drain(r, key, token, false, start.Add(ttl), t.fence, uncertain...)
			}
			if from != "" {
				s.releaseRest(ctx, key, from, t.res, start.Add(ttl))
			}
			return lease, nil
		}
		reason = why
	}
	s.undo(ctx, key, token, t.res, r, start.Add(ttl))
	if reason == "" && gaveUp {
		reason = "gave up without waiting for the pending nodes: the quorum needed one whose last call timed out"
	}
	err := s.fail(ctx, op, key, t.res, dlm.ErrNotAcquired, reason)
	if from != "" && t.n(outcomeRefused) > len(s.nodes)-s.quorum {
		return driver.Lease{}, fmt.Errorf("%w: the token handing %q off does not hold it on a majority: %w", dlm.ErrNotHeld, key, err)
	}
	return driver.Lease{}, err
}

// judgeGrant judges the replies of acquire.lua (see verdict): a grant
// records the node's counter, the fence it gave, in counters; a refusal
// records the holder's remaining TTL, or the quarantine's.
func judgeGrant(counters []int64) judge {
	return func(t *tally, i int, r []int64) (outcome, error) {
		code, v, ok := verdict(r)
		switch {
		case !ok || len(r) > 2 || code < replyRefused || code > replyQuarantined:
			return outcomeFailed, errReply(r)
		case code == replyGranted:
			counters[i], t.fence = v, max(t.fence, v)
			return outcomeGranted, nil
		case v >= 0:
			t.res[i].Remaining = time.Duration(v) * time.Millisecond
			t.res[i].Quarantined = code == replyQuarantined
		}
		return outcomeRefused, nil
	}
}

// collectGrants tallies an acquisition round's replies until it is
// decided. It gives up early, before the per-node timeout, when the
// quorum needs a node whose last call timed out (lost), and reports that
// it did; once the timeout has passed, collect fails every node still
// pending with ErrNodeTimeout.
func (s *redlock) collectGrants(ctx context.Context, r *round) (gaveUp bool) {
	t := &r.t[0]
	r.collect(ctx, func() bool {
		if t.decided(len(s.nodes), s.quorum) {
			return true
		}
		gaveUp = r.ctx.Err() == nil && s.lost(t)
		return gaveUp
	})
	return gaveUp
}

// confirm turns the grants of a quorum in r, an acquisition of keys by
// token sent at start, into a lease: the nodes that granted must reach
// distinct servers, and the fence, the largest of their counters, must be
// a majority's (writeBackFence) before the lease's validity ends. It
// returns the lease, or why there is none (reason), or the error of the
// check for distinct servers.
func (s *redlock) confirm(ctx context.Context, r *round, keys []string, token string, counters []int64, start time.Time, ttl time.Duration) (lease driver.Lease, reason string, err error) {
	t := &r.t[0]
	if r.left > 0 && !s.anySlow(t.res) {
		// The other nodes usually answer within moments: give them as
		// long again as the quorum took, so that their grants need no
		// tracking and count for the fence.
		r.linger(time.Since(start))
	}
	n, err := s.grantedDistinct(ctx, t.res)
	switch {
	case err != nil:
		return driver.Lease{}, "", err
	case n < s.quorum:
		return driver.Lease{}, fmt.Sprintf("%d of the nodes that granted reach servers not known yet to be distinct", t.n(outcomeGranted)-n), nil
	}
	if reason := s.writeBackFence(ctx, keys, token, t, counters); reason != "" {
		return driver.Lease{}, reason, nil
	}
	lease, reason = s.lease(t.fence, start, ttl)
	return lease, reason, nil
}

// writeBackFence makes t.fence, the largest counter of the nodes that
// granted an acquisition, the fence of a majority: it writes it back to as
// many of them as needed. It returns a reason when the majority was not
// reached; the nodes that failed are then marked outcomeFailed in t.res.
func (s *redlock) writeBackFence(ctx context.Context, keys []string, token string, t *tally, counters []int64) string {
	at := 0
	var low []int
	for i, r := range t.res {
		if r.Outcome == outcomeGranted {
			if counters[i] >= t.fence {
				at++
			} else {
				low = append(low, i)
			}
		}
	}
	if at >= s.quorum {
		return ""
	}
	r := s.fenceRound(ctx, keys, token, t.fence, low)
	w := &r.t[0]
	r.collect(ctx, func() bool { return w.decided(len(low), s.quorum-at) })
	for _, i := range low {
		if w.res[i].Outcome == outcomeFailed {
			t.res[i] = w.res[i]
		}
	}
	if at += w.n(outcomeGranted); at < s.quorum {
		return fmt.Sprintf("fence %d written back to only %d of the %d nodes needed", t.fence, at, s.quorum)
	}
	return ""
}

// fenceRound writes fence back to the listed nodes: their slot's counter
// becomes at least fence, and token's lock there gets fence as its own.
func (s *redlock) fenceRound(ctx context.Context, keys []string, token string, fence int64, nodes []int) *round {
	arg := strconv.FormatInt(fence, 10)
	return s.round(ctx, "fence", fenceScript, []driver.Call{{Keys: keys[:2], Args: []string{arg, token}}}, nodes, s.nodeTimeout(0),
		func(_ *tally, _ int, r []int64) (outcome, error) {
			if len(r) == 1 && r[0] >= fence {
				return outcomeGranted, nil
			}
			return outcomeFailed, errReply(r)
		})
}

// release sends the release of key by token to the listed nodes: a node
// that released it grants, one where token does not hold it refuses.
func (s *redlock) release(ctx context.Context, key, token string, nodes []int) *round {
	keys, args := lockCall(key, token, 0, 1)
	return s.round(ctx, "release", releaseScript(s.publish), []driver.Call{{Keys: keys, Args: args}}, nodes, s.nodeTimeout(0),
		func(_ *tally, _ int, r []int64) (outcome, error) {
			switch {
			case len(r) != 1:
				return outcomeFailed, errReply(r)
			case r[0] == releaseDeleted:
				return outcomeGranted, nil
			}
			return outcomeRefused, nil
		})
}

// Extend implements driver.Strategy. It succeeds when a majority extends the
// lock within the validity rule; when a majority says the token does not
// hold it, the error matches dlm.ErrNotHeld and the nodes that did extend it
// are released. Another failure leaves the lease as it was.
func (s *redlock) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	r := s.ExtendMany(ctx, []driver.HeldKey{{Key: key, Token: token}}, ttl)[0]
	return r.Lease, r.Err
}

// batchKeyTime is what ExtendMany adds to the per-node timeout for each key
// of a batch: a pipelined batch of 10,000 extensions takes a local server and
// a go-redis client about 0.4s on a loaded 2-core machine.
const batchKeyTime = 100 * time.Microsecond

// ExtendMany implements driver.Strategy. It sends all the extensions to every
// node in parallel, one pipelined batch per node, each node bounded by the
// per-node timeout, plus 100µs per key for a batch of several keys (a
// server and the client need time for every key; 10,000 keys add 1s). Each
// key then follows Extend's rule: extended when a majority extended it and
// the validity, counted from before the batches were sent, is still
// positive; an error matching dlm.ErrNotHeld, with the lock released on the
// nodes that did extend it, when a majority says the token does not hold
// it (then every node's answer is awaited, within the timeout); otherwise a
// *quorumError and the previous lease stands.
func (s *redlock) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(locks))
	var idx []int // the index in locks of each call
	var calls []driver.Call
	for i, l := range locks {
		if err := s.cfg.checkCall(l.Key, l.Token, ttl, true); err != nil {
			out[i].Err = err
			continue
		}
		idx = append(idx, i)
		keys, args := heldCall(l.Key, l.Token, ttl)
		calls = append(calls, driver.Call{Keys: keys, Args: args})
	}
	if len(calls) == 0 || ctx.Err() != nil {
		for _, i := range idx {
			out[i].Err = s.fail(ctx, "extend", locks[i].Key, s.results(), nil, "")
		}
		return out
	}
	timeout := s.nodeTimeout(ttl)
	if len(calls) > 1 {
		// Validity still counts from before the batch.
		timeout += time.Duration(len(calls)) * batchKeyTime
	}
	start := time.Now()
	r := s.round(ctx, "extend", extendScript, calls, s.all, timeout, func(t *tally, _ int, r []int64) (outcome, error) {
		code, fence, ok := verdict(r)
		switch {
		case !ok || len(r) > 2:
			return outcomeFailed, errReply(r)
		case code == replyGranted:
			t.fence = max(t.fence, fence)
			return outcomeGranted, nil
		case code == replyRevoked:
			return outcomeRefused, dlm.ErrRevoked
		}
		return outcomeRefused, nil
	})
	r.collect(ctx, func() bool {
		for k := range r.t {
			if t := &r.t[k]; !t.decided(len(s.nodes), s.quorum) || t.n(outcomeRefused) >= s.quorum {
				return false // a lost lock hears every node out, to release it
			}
		}
		return true
	})
	for k, i := range idx {
		t, l := &r.t[k], locks[i]
		reason := ""
		if t.n(outcomeGranted) >= s.quorum {
			if out[i].Lease, reason = s.lease(t.fence, start, ttl); reason == "" {
				continue
			}
		}
		var sentinel error
		if t.n(outcomeRefused) >= s.quorum {
			// The lock is lost: do not leave it on the nodes that did extend it.
			sentinel = dlm.ErrNotHeld
			s.undo(ctx, l.Key, l.Token, t.res, r, start.Add(ttl))
			for _, n := range t.res {
				if n.Outcome == outcomeRefused && errors.Is(n.Err, dlm.ErrRevoked) {
					reason = "revoked by an operator"
				}
			}
		}
		out[i].Err = s.fail(ctx, "extend", l.Key, t.res, sentinel, reason)
	}
	return out
}

// Release implements driver.Strategy. It sends the release to every node and
// returns once the outcome is known: nil when a majority no longer has the
// lock under token (released, or not held there), an error matching
// dlm.ErrNotHeld when a majority says token did not hold it, and otherwise a
// *quorumError naming the nodes that failed. Calls still running when it
// returns end within the per-node timeout.
func (s *redlock) Release(ctx context.Context, key, token string) error {
	if err := s.cfg.checkCall(key, token, 0, false); err != nil {
		return err
	}
	// Acquisition replies still to come get released as they arrive.
	s.flights.markReleasing(key, token)
	if ctx.Err() != nil {
		return s.fail(ctx, "release", key, s.results(), nil, "")
	}
	n, q := len(s.nodes), s.quorum
	start := time.Now()
	r := s.release(ctx, key, token, s.all)
	t := &r.t[0]
	notHeld := func() bool { return t.n(outcomeRefused) >= q }
	released := func() bool {
		return t.n(outcomeGranted)+t.n(outcomeRefused) >= q && t.n(outcomeRefused)+t.pending(n) < q
	}
	r.collect(ctx, func() bool {
		return notHeld() || released() || t.n(outcomeGranted)+t.n(outcomeRefused)+t.pending(n) < q
	})
	if r.left > 0 && ctx.Err() == nil && !s.anySlow(t.res) {
		// As in Acquire: the others usually answer within moments.
		r.linger(time.Since(start))
	}
	if r.left > 0 {
		// The release goes on; a new acquisition by token waits for it.
		s.drain(r, key, token, true, time.Time{}, 0) // a release round releases nothing more
	}
	switch {
	case notHeld():
		return s.fail(context.Background(), "release", key, t.res, dlm.ErrNotHeld, "")
	case released():
		return nil
	}
	return s.fail(ctx, "release", key, t.res, nil, "")
}
