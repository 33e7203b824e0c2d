package strategy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// The failover strategy's scripts are the single-instance scripts, wrapped
// so that they also report how many replicas the primary has connected.
var (
	failoverAcquireScript = wrapReplicas(acquireScript)
	failoverExtendScript  = wrapReplicas(extendScript)
	probeScript           = mustScript("failover_probe.lua")
)

func wrapReplicas(s *nodekit.Script) *nodekit.Script {
	tail := mustScript("failover_replicas.lua").Source()
	return nodekit.NewScript("local function dlm_script()\n" + s.Source() + "\nend\nlocal r = dlm_script()\n" + tail)
}

// DefaultWaitTimeout is the default bound on how long the failover strategy
// waits for replicas to acknowledge a write.
const DefaultWaitTimeout = 100 * time.Millisecond

// Failover locks on a primary with replicas, typically discovered through
// Sentinel (for go-redis, a client from redis.NewFailoverClient). It is the
// single-instance algorithm — SET NX PX with a fencing counter in one script —
// followed, on the same connection, by WAIT numreplicas timeout. A lock is
// granted only when the replicas its AckPolicy requires acknowledged the write
// (the lock and its fence) within the wait timeout; otherwise the write is
// rolled back and the error is an *AckError.
//
// Redis replication is asynchronous: a primary can grant a lock and die before
// the write reaches a replica, and Sentinel then promotes that replica, which
// grants the lock again. WAIT narrows that window but is not consensus: a
// replica promoted without the write still loses the lock. Sentinel promotes
// by replica priority and then by replication offset, not by who acknowledged,
// so only AckAll (with WithReplicas set to the deployment's replica count)
// makes every promotable replica hold every granted lock.
//
// A lease is valid for the TTL less the drift margin, counted from before the
// script was sent, so the time spent waiting for replicas is taken off it.
type Failover struct {
	node dlm.Node
	name string
	cfg  config
	fo   failoverConfig

	// Per hash slot (one Cluster shard's primary serves it): the replicas
	// that primary last reported connected, plus one; 0 until probed.
	replicas []atomic.Int32
}

var _ dlm.Handoff = (*Failover)(nil)

type failoverConfig struct {
	acks        AckPolicy
	waitTimeout time.Duration
	replicas    int // WithReplicas: the least replica count "all" and "majority" count
	aof, local  bool
}

// waits reports whether the strategy waits for anything after a write.
func (c *failoverConfig) waits() bool { return c.acks.kind != ackNone || c.aof }

// NewFailover returns the failover-replica strategy over node, whose RunWait
// must work: every driver in this module's driver/ packages qualifies (for
// go-redis, a *redis.Client, a failover client or a *redis.ClusterClient).
// A node whose RunWait reports errors.ErrUnsupported makes every call fail
// with that error.
//
// Options: WithAcks (default AckAll), WithWaitTimeout (default
// DefaultWaitTimeout), WithReplicas (default 1), WithWaitAOF, and the shared
// WithDriftFactor, WithTimeout, WithMaxTTL and WithCoalescing. WithTimeout, when set, must exceed the
// wait timeout.
func NewFailover(node dlm.Node, opts ...Option) (*Failover, error) {
	if isNil(node) {
		return nil, fmt.Errorf("%w: NewFailover: nil Node", dlm.ErrInvalid)
	}
	f := &Failover{node: node, name: nodekit.Name(node, 0), cfg: defaultConfig()}
	f.cfg.failover = &failoverConfig{acks: AckAll(), waitTimeout: DefaultWaitTimeout, replicas: 1}
	if err := applyOptions(&f.cfg, opts); err != nil {
		return nil, fmt.Errorf("NewFailover: %w", err)
	}
	f.node = f.cfg.coalesced(node)
	f.fo = *f.cfg.failover
	switch {
	case f.cfg.timeout > 0 && f.fo.waits() && f.cfg.timeout <= f.fo.waitTimeout:
		return nil, fmt.Errorf("%w: NewFailover: WithTimeout(%v) must exceed the wait timeout %v", dlm.ErrInvalid, f.cfg.timeout, f.fo.waitTimeout)
	case f.fo.aof && f.fo.acks.kind == ackNone && !f.fo.local:
		return nil, fmt.Errorf("%w: NewFailover: WithWaitAOF(false) with AckNone waits for nothing", dlm.ErrInvalid)
	}
	f.replicas = make([]atomic.Int32, slots)
	return f, nil
}

// failoverOption makes an Option that only NewFailover accepts.
func failoverOption(name string, set func(*failoverConfig) error) Option {
	return func(c *config) error {
		if c.failover == nil {
			return fmt.Errorf("%w: %s applies only to NewFailover", dlm.ErrInvalid, name)
		}
		return set(c.failover)
	}
}

// WithAcks sets how many replicas must acknowledge an acquisition or an
// extension before it is granted. The default is AckAll.
func WithAcks(p AckPolicy) Option {
	name := fmt.Sprintf("WithAcks(%v)", p)
	return failoverOption(name, func(c *failoverConfig) error {
		if p.kind == ackN && p.n < 1 {
			return fmt.Errorf("%w: %s: AckN needs at least 1 (use AckNone for no acknowledgement)", dlm.ErrInvalid, name)
		}
		c.acks = p
		return nil
	})
}

// WithWaitTimeout bounds how long the server waits for acknowledgements
// (WAIT's timeout). The default is DefaultWaitTimeout (100ms); d must be at
// least 1ms, below the TTL less its drift margin, and below the client's
// read timeout. A refused acquisition costs up to d.
func WithWaitTimeout(d time.Duration) Option {
	name := fmt.Sprintf("WithWaitTimeout(%v)", d)
	return failoverOption(name, func(c *failoverConfig) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: %s: must be at least 1ms (WAIT 0 blocks forever)", dlm.ErrInvalid, name)
		}
		c.waitTimeout = d
		return nil
	})
}

// WithReplicas sets the number of replicas the deployment is meant to have.
// AckAll and AckMajority count the larger of n and the replicas the primary
// reports connected at the time of the write, so a replica that has dropped
// off cannot lower the bar. The default is 1; with 0, a primary whose
// replicas are all disconnected grants under AckAll without any
// acknowledgement.
func WithReplicas(n int) Option {
	name := fmt.Sprintf("WithReplicas(%d)", n)
	return failoverOption(name, func(c *failoverConfig) error {
		if n < 0 {
			return fmt.Errorf("%w: %s: must not be negative", dlm.ErrInvalid, name)
		}
		c.replicas = n
		return nil
	})
}

// WithWaitAOF makes the strategy wait with WAITAOF instead of WAIT: a replica
// acknowledges once the write is fsynced to its append-only file (so replicas
// should run with appendonly yes). With local
// set, the primary's own fsync is required too (the primary must run with
// appendonly yes). WAITAOF needs Redis 7.2 or later: the strategy probes the
// server before its first write and refuses, with an error matching
// dlm.ErrInvalid and naming the server's version, when the server lacks it.
// Off by default.
func WithWaitAOF(local bool) Option {
	return failoverOption(fmt.Sprintf("WithWaitAOF(%v)", local), func(c *failoverConfig) error {
		c.aof, c.local = true, local
		return nil
	})
}

// An AckPolicy says how many replicas must acknowledge a write. The zero
// value is AckAll.
type AckPolicy struct {
	kind ackKind
	n    int
}

type ackKind uint8

const (
	ackAll ackKind = iota
	ackMajority
	ackN
	ackNone
)

// AckAll requires every replica: the larger of WithReplicas and the number
// the primary reports connected.
func AckAll() AckPolicy { return AckPolicy{kind: ackAll} }

// AckMajority requires more than half of the replicas counted as for AckAll.
func AckMajority() AckPolicy { return AckPolicy{kind: ackMajority} }

// AckN requires n replicas (n ≥ 1; WithAcks rejects less).
func AckN(n int) AckPolicy { return AckPolicy{kind: ackN, n: n} }

// AckNone requires no acknowledgement: the strategy then behaves like
// Single on the primary and sends no WAIT (unless WithWaitAOF(true)).
func AckNone() AckPolicy { return AckPolicy{kind: ackNone} }

// need is the number of acknowledgements required from replicas replicas.
func (p AckPolicy) need(replicas int) int {
	switch p.kind {
	case ackAll:
		return replicas
	case ackMajority:
		return replicas/2 + 1
	case ackN:
		return p.n
	}
	return 0
}

// String returns "all", "majority", "none" or the number of AckN.
func (p AckPolicy) String() string {
	switch p.kind {
	case ackAll:
		return "all"
	case ackMajority:
		return "majority"
	case ackNone:
		return "none"
	}
	return strconv.Itoa(p.n)
}

// ParseAckPolicy parses the form String returns. The error matches
// dlm.ErrInvalid.
func ParseAckPolicy(s string) (AckPolicy, error) {
	switch s {
	case "all":
		return AckAll(), nil
	case "majority":
		return AckMajority(), nil
	case "none":
		return AckNone(), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return AckPolicy{}, fmt.Errorf("%w: ack policy %q: want all, majority, none or a number ≥ 1", dlm.ErrInvalid, s)
	}
	return AckN(n), nil
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (p AckPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseAckPolicy.
func (p *AckPolicy) UnmarshalText(b []byte) error {
	q, err := ParseAckPolicy(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// AckError reports that fewer replicas acknowledged a write than the policy
// requires, within the wait timeout. For an acquisition it matches
// dlm.ErrNotAcquired and the lock was rolled back. For an extension it matches
// no sentinel: the primary keeps the new TTL, but only the lease from before
// the extension may be trusted.
type AckError struct {
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

func (e *AckError) Error() string {
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

// Is makes an acquisition's AckError match dlm.ErrNotAcquired.
func (e *AckError) Is(target error) bool { return target == dlm.ErrNotAcquired && e.Op == "acquire" }

// ServerInfo is what Probe learns about the node's server.
type ServerInfo struct {
	Version  string // redis_version, such as "7.0.15"
	Primary  bool   // the server is a primary (role:master)
	Replicas int    // replicas connected to it
	AOF      bool   // appendonly is enabled
	WaitAOF  bool   // the server offers WAITAOF (Redis 7.2 or later)
}

// Probe asks the node's server for its version, role, connected replicas and
// persistence, with one script run (INFO from Lua); on a Cluster, any one
// master answers. The strategy probes before its first write to each hash
// slot, on the master that serves it; Probe lets a program check a
// deployment up front.
func (f *Failover) Probe(ctx context.Context) (ServerInfo, error) {
	return f.probe(ctx, nil)
}

// probe is Probe on the server that serves keys.
func (f *Failover) probe(ctx context.Context, keys []string) (ServerInfo, error) {
	cctx, cancel := f.cfg.withTimeout(ctx)
	defer cancel()
	r, err := probeScript.Run(cctx, f.node, keys)
	if err == nil && len(r) != 6 {
		err = errReply(r)
	}
	if err != nil {
		return ServerInfo{}, &NodeError{Node: f.name, Op: "probe", Err: err}
	}
	info := ServerInfo{
		Version:  fmt.Sprintf("%d.%d.%d", r[0], r[1], r[2]),
		Primary:  r[3] == 1,
		Replicas: int(r[4]),
		AOF:      r[5] == 1,
		WaitAOF:  r[0] > 7 || r[0] == 7 && r[1] >= 2,
	}
	return info, nil
}

// prepare returns the wait to send after a write to keys (a lock's), probing
// the server that serves them first when the strategy knows nothing of it
// yet. Replica counts are kept per hash slot: on a Cluster each shard has
// its own.
func (f *Failover) prepare(ctx context.Context, keys []string) (dlm.Wait, error) {
	if !f.fo.waits() {
		return dlm.Wait{}, nil
	}
	slot := nodekit.Slot(keys[0])
	n := int(f.replicas[slot].Load()) - 1
	if n < 0 {
		info, err := f.probe(ctx, keys[:1])
		if err != nil {
			return dlm.Wait{}, err
		}
		if !info.Primary {
			return dlm.Wait{}, &NodeError{Node: f.name, Op: "probe", Err: errors.New("the server is a replica, not a primary")}
		}
		if f.fo.aof {
			switch {
			case !info.WaitAOF:
				return dlm.Wait{}, fmt.Errorf("%w: WithWaitAOF: %s runs Redis %s, which has no WAITAOF (it needs Redis 7.2 or later)", dlm.ErrInvalid, f.name, info.Version)
			case f.fo.local && !info.AOF:
				return dlm.Wait{}, fmt.Errorf("%w: WithWaitAOF(true): %s runs with appendonly off, so it cannot fsync locally", dlm.ErrInvalid, f.name)
			}
		}
		n = info.Replicas
		f.replicas[slot].Store(int32(n) + 1)
	}
	return f.wait(n), nil
}

// wait is the wait after a write on a primary with n replicas connected.
func (f *Failover) wait(n int) dlm.Wait {
	return dlm.Wait{
		Replicas: f.fo.acks.need(max(n, f.fo.replicas)),
		Timeout:  f.fo.waitTimeout,
		AOF:      f.fo.aof,
		Local:    f.fo.local,
	}
}

// run runs s (or its wrapped form followed by the wait) and returns the
// single-instance part of the reply, the acknowledgements and the replicas
// the primary reported connected (-1 when not asked). When the write
// succeeded (the reply starts with 1) but the wait asked for fewer replicas
// than the primary turned out to have (a replica joined), the write, which
// is idempotent, and a wait for the right count are sent once more.
func (f *Failover) run(ctx context.Context, plain, wrapped *nodekit.Script, w dlm.Wait, want int, keys []string, args ...string) ([]int64, dlm.Acks, int, error) {
	if !f.fo.waits() {
		r, err := plain.Run(ctx, f.node, keys, args...)
		if err == nil && len(r) != want {
			err = errReply(r)
		}
		return r, dlm.Acks{}, -1, err
	}
	for again := true; ; again = false {
		r, acks, err := wrapped.RunWait(ctx, f.node, w, keys, args...)
		if err == nil && len(r) != want+1 {
			err = errReply(r)
		}
		if err != nil {
			return r, acks, -1, err
		}
		connected := int(r[want])
		f.replicas[nodekit.Slot(keys[0])].Store(int32(connected) + 1)
		if right := f.wait(connected); again && r[0] == 1 && acks.Replicas < right.Replicas && w.Replicas < right.Replicas {
			w = right
			continue
		}
		return r[:want], acks, connected, nil
	}
}

// checkAcks returns an *AckError when acks fall short of the policy.
func (f *Failover) checkAcks(op, key string, w dlm.Wait, acks dlm.Acks, connected int) error {
	if !f.fo.waits() {
		return nil
	}
	wanted := f.fo.acks.need(max(connected, f.fo.replicas))
	if acks.Replicas >= wanted && (!w.Local || acks.Local) {
		return nil
	}
	return &AckError{
		Op: op, Key: key, Acked: acks.Replicas, Wanted: wanted, Connected: connected,
		Policy: f.fo.acks, Timeout: f.fo.waitTimeout, AOF: w.AOF, LocalMissing: w.Local && !acks.Local,
	}
}

func (f *Failover) checkCall(key, token string, ttl time.Duration, needTTL bool) error {
	if err := f.cfg.checkCall(key, token, ttl, needTTL); err != nil {
		return err
	}
	if needTTL && f.fo.waits() && ttl <= f.cfg.driftMargin(ttl)+f.fo.waitTimeout {
		return fmt.Errorf("%w: TTL %v is not above its clock-drift margin %v plus the wait timeout %v",
			dlm.ErrInvalid, ttl, f.cfg.driftMargin(ttl), f.fo.waitTimeout)
	}
	return nil
}

// Acquire implements dlm.Strategy. It runs the acquire script and, on the
// same connection, WAIT; when the policy's acknowledgements are missing it
// releases the lock and returns an *AckError. A server that answers READONLY
// (a demoted primary) or any other error is "not acquired".
func (f *Failover) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	return f.acquire(ctx, key, token, "", ttl)
}

// Handoff implements dlm.Handoff: the acquire script, which replaces from's
// lock by to's, and WAIT, as Acquire. When from does not hold key the error
// matches dlm.ErrNotHeld and nothing changed; when the acknowledgements are
// missing the new lock is released, so from's lock is gone too.
func (f *Failover) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (dlm.Lease, error) {
	if err := checkHandoff(from, to); err != nil {
		return dlm.Lease{}, err
	}
	return f.acquire(ctx, key, to, from, ttl)
}

// acquire is Acquire, or with from set Handoff.
func (f *Failover) acquire(ctx context.Context, key, token, from string, ttl time.Duration) (dlm.Lease, error) {
	if err := f.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	start := time.Now() // before a first probe, which may take a round trip too
	keys, args := acquireCall(key, token, from, ttl, f.cfg.maxTTL)
	w, err := f.prepare(ctx, keys)
	if err != nil {
		return dlm.Lease{}, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
	}
	cctx, cancel := f.cfg.withTimeout(ctx)
	r, acks, connected, err := f.run(cctx, acquireScript, failoverAcquireScript, w, 2, keys, args...)
	cancel()
	if err == nil && (r[0] < 0 || r[0] > 2) {
		err = errReply(r)
	}
	if err != nil {
		err := &NodeError{Node: f.name, Op: "acquire", Err: err}
		if !notRun(err) {
			// The script may have run even though the reply was lost: undo it.
			undo(ctx, &f.cfg, f.node, key, token, start.Add(ttl))
		}
		return dlm.Lease{}, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
	}
	if r[0] != 1 {
		return dlm.Lease{}, refusal(key, from, f.name, r)
	}
	if err := f.checkAcks("acquire", key, w, acks, connected); err != nil {
		undo(ctx, &f.cfg, f.node, key, token, start.Add(ttl))
		return dlm.Lease{}, err
	}
	lease := f.lease(start, ttl, r[1])
	if !time.Now().Before(lease.Until) {
		undo(ctx, &f.cfg, f.node, key, token, start.Add(ttl))
		return dlm.Lease{}, fmt.Errorf("%w: %q: the lease's validity ran out while waiting for replicas", dlm.ErrNotAcquired, key)
	}
	return lease, nil
}

// Extend implements dlm.Strategy. When the policy's acknowledgements are
// missing it returns an *AckError and the previous lease stands.
func (f *Failover) Extend(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	if err := f.checkCall(key, token, ttl, true); err != nil {
		return dlm.Lease{}, err
	}
	start := time.Now()
	keys, args := heldCall(key, token, ttl)
	w, err := f.prepare(ctx, keys)
	if err != nil {
		return dlm.Lease{}, err
	}
	cctx, cancel := f.cfg.withTimeout(ctx)
	defer cancel()
	r, acks, connected, err := f.run(cctx, extendScript, failoverExtendScript, w, 2, keys, args...)
	if err != nil {
		return dlm.Lease{}, &NodeError{Node: f.name, Op: "extend", Err: err}
	}
	switch r[0] {
	case 3:
		return dlm.Lease{}, errRevoked(key, f.name)
	case 1:
	default:
		return dlm.Lease{}, fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, key, f.name)
	}
	if err := f.checkAcks("extend", key, w, acks, connected); err != nil {
		return dlm.Lease{}, err
	}
	return f.lease(start, ttl, r[1]), nil
}

// Release implements dlm.Strategy. It does not wait for replicas: a release
// that a promoted replica misses only keeps the lock until its TTL.
func (f *Failover) Release(ctx context.Context, key, token string) error {
	if err := f.checkCall(key, token, 0, false); err != nil {
		return err
	}
	cctx, cancel := f.cfg.withTimeout(ctx)
	defer cancel()
	keys, args := releaseCall(key, token, f.node)
	r, err := releaseScript.Run(cctx, f.node, keys, args...)
	if err == nil && len(r) != 1 {
		err = errReply(r)
	}
	if err != nil {
		return &NodeError{Node: f.name, Op: "release", Err: err}
	}
	if r[0] != 1 {
		return fmt.Errorf("%w: %q is not held by this token on %s", dlm.ErrNotHeld, key, f.name)
	}
	return nil
}

// lease is valid for ttl less the drift margin, counted from before the
// script was sent, so the wait for replicas is taken off.
func (f *Failover) lease(start time.Time, ttl time.Duration, fence int64) dlm.Lease {
	return dlm.Lease{Fence: uint64(fence), Until: start.Add(ttl - f.cfg.driftMargin(ttl))}
}

// extendParallel bounds the concurrent Extend calls of ExtendMany when the
// strategy waits for replicas.
const extendParallel = 16

// ExtendMany implements dlm.Strategy. Under AckNone (without WithWaitAOF) it
// runs the extensions pipelined on the primary (one round trip for the
// batch), as Single does; a WithTimeout bound then grows by 100µs per key.
// Otherwise each lock is extended with Extend, 16 at a time, each followed by
// its own WAIT on the same connection: WAIT counts the acknowledgements of
// the last write on its connection, and a pipelined batch may be spread over
// several connections, so one WAIT after a batch would not cover it. Every
// lease's validity is counted from before the first extension was sent.
func (f *Failover) ExtendMany(ctx context.Context, locks []dlm.HeldKey, ttl time.Duration) []dlm.ExtendResult {
	out := make([]dlm.ExtendResult, len(locks))
	start := time.Now()
	if f.fo.waits() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, extendParallel)
		for i, l := range locks {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				lease, err := f.Extend(ctx, l.Key, l.Token, ttl)
				if err == nil {
					lease = f.lease(start, ttl, int64(lease.Fence))
				}
				out[i] = dlm.ExtendResult{Lease: lease, Err: err}
			}()
		}
		wg.Wait()
		return out
	}
	return extendBatch(ctx, &f.cfg, f.node, f.name, locks, ttl)
}

// WatchRelease implements dlm.Strategy on the primary: the release
// script publishes on a channel named like the lock's key. The subscription
// lives on a connection of the node's client; when the client reconnects
// it subscribes again, on whatever server it dials (go-redis' failover
// client dials the primary Sentinel names at that time). Messages published
// in between are lost: notifications are hints, and waiters still poll at
// the Manager's maximum retry delay.
// When the node cannot watch, the error matches errors.ErrUnsupported.
func (f *Failover) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	return watchRelease(ctx, &f.cfg, f.node, f.name, key, notify)
}
