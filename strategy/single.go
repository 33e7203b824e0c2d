package strategy

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Single locks on one Redis endpoint: SET NX PX with a fencing counter,
// compare-and-pexpire to extend, compare-and-delete to release.
//
// Its guarantees are those of the endpoint: a failover to a replica that had
// not yet received the lock, or a restart without persistence, lets a second
// owner in. See the failover strategy for a primary with replicas.
type Single struct{ one }

var _ dlm.Handoff = (*Single)(nil)

// one is the algorithm of the strategies that lock on one node: Single,
// and Failover, which follows each write by a wait for its replicas
// (failover.go: prepare, runWait, checkAcks, extendEach).
type one struct {
	node dlm.Node
	name string
	cfg  config
	fo   *failoverConfig // Failover's options; nil for Single

	// Failover's, per hash slot (one Cluster shard's primary serves it):
	// the replicas that primary last reported connected, plus one; 0 until
	// probed.
	replicas []atomic.Int32
}

// NewSingle returns the single-instance strategy over node.
// Options: WithDriftFactor, WithTimeout, WithMaxTTL, WithCoalescing.
func NewSingle(node dlm.Node, opts ...Option) (*Single, error) {
	if isNil(node) {
		return nil, fmt.Errorf("%w: NewSingle: nil Node", dlm.ErrInvalid)
	}
	s := &Single{one{node: node, name: nodekit.Name(node, 0), cfg: defaultConfig()}}
	if err := applyOptions(&s.cfg, opts); err != nil {
		return nil, fmt.Errorf("NewSingle: %w", err)
	}
	s.node = s.cfg.coalesced(node)
	return s, nil
}

// Acquire implements dlm.Strategy.
func (s *Single) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	return s.acquire(ctx, key, token, "", ttl)
}

// Handoff implements dlm.Handoff: one run of the acquire script, which
// replaces from's lock by to's. When from does not hold key the error
// matches dlm.ErrNotHeld (and dlm.ErrNotAcquired) and nothing changed.
func (s *Single) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (dlm.Lease, error) {
	return s.handoff(ctx, key, from, to, ttl)
}

// Extend implements dlm.Strategy.
func (s *Single) Extend(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	return s.extend(ctx, key, token, ttl)
}

// Release implements dlm.Strategy.
func (s *Single) Release(ctx context.Context, key, token string) error {
	return s.release(ctx, key, token)
}

// ExtendMany implements dlm.Strategy: the extensions run pipelined, in one
// round trip for the batch. The whole batch is one call, bounded by WithTimeout plus
// 100µs per key; the Manager's auto-renewal sends batches of at most a
// thousand locks.
func (s *Single) ExtendMany(ctx context.Context, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	return s.extendBatch(ctx, locks, ttl)
}

// WatchRelease implements dlm.Strategy. The release script publishes on a
// channel named like the lock's Redis key when an acquisition was refused
// on the lock; when the node cannot watch, the error matches
// errors.ErrUnsupported. Expiry publishes nothing: a waiter learns the
// holder's remaining TTL from HeldError and tries again when it runs out.
func (s *Single) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	return s.watchRelease(ctx, key, notify)
}

// Node returns the node the strategy locks on (wrapped for coalescing
// unless WithCoalescing(false)): the one deployment that primitives needing
// one order of events, such as package fairlock's arrival queue, keep their
// state on.
func (s *Single) Node() dlm.Node { return s.node }

// checkCall validates a call's arguments; a Failover's TTL must also leave
// room for the wait for replicas.
func (o *one) checkCall(key, token string, ttl time.Duration, needTTL bool) error {
	if err := o.cfg.checkCall(key, token, ttl, needTTL); err != nil {
		return err
	}
	if needTTL && o.fo.waits() && ttl <= o.cfg.driftMargin(ttl)+o.fo.waitTimeout {
		return fmt.Errorf("%w: TTL %v is not above its clock-drift margin %v plus the wait timeout %v",
			dlm.ErrInvalid, ttl, o.cfg.driftMargin(ttl), o.fo.waitTimeout)
	}
	return nil
}

// handoff is Handoff.
func (o *one) handoff(ctx context.Context, key, from, to string, ttl time.Duration) (dlm.Lease, error) {
	if err := checkHandoff(from, to); err != nil {
		return dlm.Lease{}, err
	}
	return o.acquire(ctx, key, to, from, ttl)
}

// acquire is Acquire, or with from set Handoff.
func (o *one) acquire(ctx context.Context, key, token, from string, ttl time.Duration) (dlm.Lease, error) {
	if err := o.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	start := time.Now() // before a Failover's first probe, which may take a round trip too
	keys, args := acquireCall(key, token, from, ttl, o.cfg.maxTTL)
	var w dlm.Wait
	if o.fo.waits() {
		var err error
		if w, err = o.prepare(ctx, keys); err != nil {
			return dlm.Lease{}, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
		}
	}
	cctx, cancel := o.cfg.withTimeout(ctx)
	r, acks, connected, err := o.run(cctx, acquireScript, failoverAcquireScript, w, keys, args)
	cancel()
	code, v, _ := verdict(r)
	if err == nil && (code < 0 || code > 2) {
		err = errReply(r)
	}
	if err != nil {
		err := &NodeError{Node: o.name, Op: "acquire", Err: err}
		if !notRun(err) {
			// The script may have run even though the reply was lost: undo it.
			o.undo(ctx, key, token, start.Add(ttl))
		}
		return dlm.Lease{}, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
	}
	if code != 1 {
		return dlm.Lease{}, refusal(key, from, o.name, code, v)
	}
	if o.fo.waits() {
		if err := o.checkAcks("acquire", key, w, acks, connected); err != nil {
			o.undo(ctx, key, token, start.Add(ttl))
			return dlm.Lease{}, err
		}
	}
	l := o.lease(start, ttl, v)
	if took := time.Since(start); !l.Until.After(start.Add(took)) {
		// Granted, but the reply (or the replicas' acknowledgements) came
		// after the lease's validity ended: a lock nobody may trust. Give
		// it back.
		o.undo(ctx, key, token, start.Add(ttl))
		return dlm.Lease{}, fmt.Errorf("%w: %q: %s answered after %v, past the lease's validity of %v",
			dlm.ErrNotAcquired, key, o.name, took.Round(time.Millisecond), ttl-o.cfg.driftMargin(ttl))
	}
	return l, nil
}

// extend is Extend.
func (o *one) extend(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	if err := o.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	start := time.Now()
	keys, args := heldCall(key, token, ttl)
	var w dlm.Wait
	if o.fo.waits() {
		var err error
		if w, err = o.prepare(ctx, keys); err != nil {
			return dlm.Lease{}, err
		}
	}
	cctx, cancel := o.cfg.withTimeout(ctx)
	defer cancel()
	r, acks, connected, err := o.run(cctx, extendScript, failoverExtendScript, w, keys, args)
	if err != nil {
		return dlm.Lease{}, &NodeError{Node: o.name, Op: "extend", Err: err}
	}
	code, fence, _ := verdict(r)
	if err := extended(key, o.name, code); err != nil {
		return dlm.Lease{}, err
	}
	if o.fo.waits() {
		if err := o.checkAcks("extend", key, w, acks, connected); err != nil {
			return dlm.Lease{}, err
		}
	}
	return o.lease(start, ttl, fence), nil
}

// extended returns nil for an extend script's reply, with verdict's code,
// that extended key's lock, else why not.
func extended(key, node string, code int64) error {
	switch code {
	case 1:
		return nil
	case 3:
		return errRevoked(key, node)
	}
	return errNotHeld(key, node)
}

// run runs a script that replies as verdict reads: plain, or on a
// Failover that waits, wrapped followed by the wait w (runWait). It
// returns the reply, the acknowledgements and the replicas the primary
// reported connected (-1 when not asked).
func (o *one) run(ctx context.Context, plain, wrapped *nodekit.Script, w dlm.Wait, keys, args []string) ([]int64, dlm.Acks, int, error) {
	if o.fo.waits() {
		return o.runWait(ctx, wrapped, w, 2, keys, args...)
	}
	r, err := plain.Run(ctx, o.node, keys, args...)
	if _, _, ok := verdict(r); err == nil && (!ok || len(r) > 2) {
		err = errReply(r)
	}
	return r, dlm.Acks{}, -1, err
}

// release is Release. It does not wait for replicas: a release that a
// promoted replica misses only keeps the lock until its TTL.
func (o *one) release(ctx context.Context, key, token string) error {
	if err := o.checkCall(key, token, 0, false); err != nil {
		return err
	}
	cctx, cancel := o.cfg.withTimeout(ctx)
	defer cancel()
	script, keys, args := releaseCall(key, token, o.node)
	r, err := script.Run(cctx, o.node, keys, args...)
	if err == nil && len(r) != 1 {
		err = errReply(r)
	}
	if err != nil {
		return &NodeError{Node: o.name, Op: "release", Err: err}
	}
	if r[0] != 1 {
		return errNotHeld(key, o.name)
	}
	return nil
}

// lease is valid for ttl less the drift margin, counted from before the
// request was sent (so a Failover's wait for replicas is taken off).
func (o *one) lease(start time.Time, ttl time.Duration, fence int64) dlm.Lease {
	return dlm.Lease{Fence: uint64(fence), Until: start.Add(ttl - o.cfg.driftMargin(ttl))}
}

// notRun reports whether the node refused a call before running it because
// its hash slot is moving (TRYAGAIN): there is nothing to undo.
func notRun(err *NodeError) bool {
	_, moving := err.RetryAfter()
	return moving
}

// refusal is the error of an acquisition the acquire script refused with
// code 0 and the lock's pttl, or code 2 and the quarantine's ms; from is
// the token of a hand-off, or empty.
func refusal(key, from, node string, code, v int64) error {
	if from != "" && code == 0 {
		return fmt.Errorf("%w: %w: hand-off of %q: the token handing it off does not hold it on %s", dlm.ErrNotAcquired, dlm.ErrNotHeld, key, node)
	}
	return &HeldError{Key: key, Remaining: time.Duration(v) * time.Millisecond, Quarantined: code == 2}
}

// undo releases token's lock on key in the background, so that the call
// that gives the lock back returns within its own deadline. A release that
// fails (the server is frozen, unreachable, restarting) is tried again,
// with growing pauses, until the server answers or until expires, after
// which no grant of that attempt can be left on the server. A refusal (the
// token holds nothing) is checked once more a little later: a server that
// thaws may run the acquisition, sent on another connection, after the
// release. A later acquisition uses another token, so a late release
// cannot delete it.
func (o *one) undo(ctx context.Context, key, token string, expires time.Time) {
	c, node := &o.cfg, o.node
	script, keys, args := releaseCall(key, token, node)
	go func() {
		refused := false
		for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
			rctx, cancel := c.cleanupContext(ctx)
			r, err := script.Run(rctx, node, keys, args...)
			cancel()
			switch {
			case err == nil && len(r) == 1 && r[0] == 1, err == nil && refused:
				return // released, or not held twice over
			case err == nil:
				refused = true
			}
			if !time.Now().Add(pause).Before(expires) {
				return
			}
			time.Sleep(pause)
		}
	}()
}

// extendBatch extends locks held on node in one pipelined batch (on a
// Failover that waits, one by one: extendEach). A WithTimeout bound grows
// by batchKeyTime per key. Every lease counts from before the batch was
// sent.
func (o *one) extendBatch(ctx context.Context, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	if o.fo.waits() {
		return o.extendEach(ctx, locks, ttl)
	}
	c, node, name := &o.cfg, o.node, o.name
	out := make([]dlm.ExtendResult, len(locks))
	calls := make([]dlm.Call, 0, len(locks))
	idx := make([]int, 0, len(locks))
	for i, l := range locks {
		if err := c.checkCall(l.Key, l.Token, ttl, true); err != nil {
			out[i].Err = err
			continue
		}
		keys, args := heldCall(l.Key, l.Token, ttl)
		calls = append(calls, dlm.Call{Keys: keys, Args: args})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return out
	}
	start := time.Now()
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if c.timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, c.timeout+time.Duration(len(calls))*batchKeyTime)
	}
	defer cancel()
	extendScript.RunMany(cctx, node, calls)
	until := start.Add(ttl - c.driftMargin(ttl))
	for j, i := range idx {
		r, e := calls[j].Reply, calls[j].Err
		code, fence, ok := verdict(r)
		if e == nil && (!ok || len(r) > 2) {
			e = errReply(r)
		}
		switch {
		case e != nil:
			out[i].Err = &NodeError{Node: name, Op: "extend", Err: e}
		default:
			if out[i].Err = extended(locks[i].Key, name, code); out[i].Err == nil {
				out[i].Lease = dlm.Lease{Fence: uint64(fence), Until: until}
			}
		}
	}
	return out
}

// watchRelease calls notify whenever the release script publishes on key's
// channel (named like the lock's Redis key) on node. When the node cannot
// watch, the error matches errors.ErrUnsupported.
func (o *one) watchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	if err := o.cfg.checkCall(key, "-", 0, false); err != nil {
		return nil, err
	}
	stop, err := o.node.Watch(ctx, lockName(key), func(string) { notify() })
	if err != nil {
		return nil, &NodeError{Node: o.name, Op: "watch", Err: err}
	}
	return stop, nil
}

// A OneDeployment is a strategy whose locks all live on one Redis
// deployment, reached through Node: Single and Failover. Primitives that
// need one order of events there (packages fairlock and election) require
// it.
type OneDeployment interface {
	dlm.Strategy
	Node() dlm.Node
}

var (
	_ OneDeployment = (*Single)(nil)
	_ OneDeployment = (*Failover)(nil)
)
