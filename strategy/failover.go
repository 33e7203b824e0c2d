package strategy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm"
)

// failover is the strategy NewFailover returns.
type failover struct {
	endpoint
	fo *failoverConfig

	// Per hash slot (one Cluster shard's primary serves it): the replicas
	// that primary last reported connected, plus one; 0 until probed.
	replicas []atomic.Int32
}

var _ driver.Handoff = (*failover)(nil)

// NewFailover returns the failover-replica strategy over node, whose RunWait
// must work: every driver in this module's driver/ packages qualifies (for
// go-redis, a *redis.Client, a failover client or a *redis.ClusterClient).
// A node whose RunWait reports errors.ErrUnsupported makes every call fail
// with that error.
//
// Options: WithAcks (default AckAll), WithWaitTimeout (default
// DefaultWaitTimeout), WithReplicas (default 1), WithWaitAOF, and the shared
// WithDriftFactor, WithTimeout, WithMaxTTL and WithCoalescing. WithTimeout, when set, must exceed the
// wait timeout. Under AckNone without WithWaitAOF it waits for nothing and
// locks as the single-instance strategy does.
//
// It locks on a primary with replicas, typically discovered through
// Sentinel (for go-redis, a client from redis.NewFailoverClient). It is the
// single-instance algorithm — SET NX PX with a fencing counter in one script —
// followed, on the same connection, by WAIT numreplicas timeout. A lock is
// granted only when the replicas its AckPolicy requires acknowledged the write
// (the lock and its fence) within the wait timeout; otherwise the write is
// rolled back and the error is an *ackError.
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
func NewFailover(node driver.Node, opts ...Option) (driver.Strategy, error) {
	cfg := defaultConfig()
	cfg.failover = &failoverConfig{acks: AckAll(), waitTimeout: DefaultWaitTimeout, replicas: 1}
	e, err := newEndpoint("NewFailover", node, cfg, opts)
	if err != nil {
		return nil, err
	}
	f := &failover{endpoint: e, fo: e.cfg.failover, replicas: make([]atomic.Int32, slots)}
	switch {
	case f.cfg.timeout > 0 && f.fo.waits() && f.cfg.timeout <= f.fo.waitTimeout:
		return nil, errs.Within("strategy.NewFailover", fmt.Errorf("%w: WithTimeout(%v) must exceed the wait timeout %v", dlm.ErrInvalid, f.cfg.timeout, f.fo.waitTimeout))
	case f.fo.aof && f.fo.acks.kind == ackNone && !f.fo.local:
		return nil, errs.Within("strategy.NewFailover", fmt.Errorf("%w: WithWaitAOF(false) with AckNone waits for nothing", dlm.ErrInvalid))
	}
	return f, nil
}

// Acquire implements driver.Strategy. It runs the acquire script and, on the
// same connection, WAIT; when the policy's acknowledgements are missing it
// releases the lock and returns an *ackError. A server that answers READONLY
// (a demoted primary) or any other error is "not acquired".
func (f *failover) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	if !f.fo.waits() {
		return f.endpoint.acquire(ctx, key, token, "", ttl)
	}
	return f.acquire(ctx, key, token, "", ttl)
}

// Handoff implements driver.Handoff: the acquire script, which replaces from's
// lock by to's, and WAIT, as Acquire. When from does not hold key the error
// matches dlm.ErrNotHeld and nothing changed; when the acknowledgements are
// missing the new lock is released, so from's lock is gone too.
func (f *failover) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	if err := checkHandoff(from, to); err != nil {
		return driver.Lease{}, err
	}
	if !f.fo.waits() {
		return f.endpoint.acquire(ctx, key, to, from, ttl)
	}
	return f.acquire(ctx, key, to, from, ttl)
}

// Extend implements driver.Strategy. When the policy's acknowledgements are
// missing it returns an *ackError and the previous lease stands.
func (f *failover) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	if !f.fo.waits() {
		return f.endpoint.extend(ctx, key, token, ttl)
	}
	return f.extend(ctx, key, token, ttl)
}

// Release implements driver.Strategy. It does not wait for replicas: a release
// that a promoted replica misses only keeps the lock until its TTL.
func (f *failover) Release(ctx context.Context, key, token string) error {
	return f.release(ctx, key, token)
}

// ExtendMany implements driver.Strategy. Under AckNone (without WithWaitAOF) it
// runs the extensions pipelined on the primary (one round trip for the
// batch), as Single does; a WithTimeout bound then grows by 100µs per key.
// Otherwise each lock is extended with Extend, 16 at a time, each followed by
// its own WAIT on the same connection: WAIT counts the acknowledgements of
// the last write on its connection, and a pipelined batch may be spread over
// several connections, so one WAIT after a batch would not cover it. Every
// lease's validity is counted from before the first extension was sent.
func (f *failover) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	if !f.fo.waits() {
		return f.extendBatch(ctx, locks, ttl)
	}
	return f.extendEach(ctx, locks, ttl)
}

// WatchRelease implements driver.Strategy on the primary: the release
// script publishes on a channel named like the lock's key. The subscription
// lives on a connection of the node's client; when the client reconnects
// it subscribes again, on whatever server it dials (go-redis' failover
// client dials the primary Sentinel names at that time). Messages published
// in between are lost: notifications are hints, and waiters still poll at
// the Manager's maximum retry delay.
// When the node cannot watch, the error matches errors.ErrUnsupported.
func (f *failover) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	return f.watchRelease(ctx, key, notify)
}

// Node returns the node the strategy locks on (wrapped for coalescing
// unless WithCoalescing(false)); see Single.Node.
func (f *failover) Node() driver.Node { return f.node }

// The algorithm of a Failover that waits follows: Single's, with a wait
// for replicas after each write, on the same connection.

// checkCall validates an acquisition's or extension's arguments: the TTL
// must also leave room for the wait for replicas.
func (f *failover) checkCall(key, token string, ttl time.Duration) error {
	if err := f.cfg.checkCall(key, token, ttl, true); err != nil {
		return err
	}
	if margin := f.cfg.driftMargin(ttl); ttl <= margin+f.fo.waitTimeout {
		return fmt.Errorf("%w: TTL %v is not above its clock-drift margin %v plus the wait timeout %v",
			dlm.ErrInvalid, ttl, margin, f.fo.waitTimeout)
	}
	return nil
}

// acquire is Acquire, or with from set Handoff, when the strategy waits.
func (f *failover) acquire(ctx context.Context, key, token, from string, ttl time.Duration) (driver.Lease, error) {
	if err := f.checkCall(key, token, ttl); err != nil {
		return driver.Lease{}, err
	}
	start := time.Now() // before the first probe, which may take a round trip too
	keys, args := acquireCall(key, token, from, ttl, f.cfg.maxTTL)
	w, err := f.prepare(ctx, keys)
	if err != nil {
		return driver.Lease{}, fmt.Errorf("%w: %w", dlm.ErrNotAcquired, err)
	}
	cctx, cancel := f.cfg.withTimeout(ctx)
	r, acks, connected, err := f.runWait(cctx, failoverAcquireScript, w, keys, args...)
	cancel()
	fence, err := f.acquired(ctx, key, token, from, start.Add(ttl), r, err)
	if err != nil {
		return driver.Lease{}, err
	}
	if err := f.checkAcks("acquire", key, w, acks, connected); err != nil {
		f.undo(ctx, key, token, start.Add(ttl))
		return driver.Lease{}, err
	}
	return f.timelyLease(ctx, key, token, start, ttl, fence)
}

// extend is Extend when the strategy waits.
func (f *failover) extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	if err := f.checkCall(key, token, ttl); err != nil {
		return driver.Lease{}, err
	}
	start := time.Now()
	keys, args := heldCall(key, token, ttl)
	w, err := f.prepare(ctx, keys)
	if err != nil {
		return driver.Lease{}, err
	}
	cctx, cancel := f.cfg.withTimeout(ctx)
	defer cancel()
	r, acks, connected, err := f.runWait(cctx, failoverExtendScript, w, keys, args...)
	fence, err := f.extended(key, r, err)
	if err != nil {
		return driver.Lease{}, err
	}
	if err := f.checkAcks("extend", key, w, acks, connected); err != nil {
		return driver.Lease{}, err
	}
	return f.lease(start, ttl, fence), nil
}

// extendParallel bounds the concurrent Extend calls of ExtendMany when the
// strategy waits for replicas.
const extendParallel = 16

// extendEach is ExtendMany when the strategy waits: each lock extended
// with extend, extendParallel at a time, every lease counted from before
// the first was sent.
func (f *failover) extendEach(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(locks))
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, extendParallel)
	for i, l := range locks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			lease, err := f.extend(ctx, l.Key, l.Token, ttl)
			if err == nil {
				lease = f.lease(start, ttl, int64(lease.Fence))
			}
			out[i] = driver.ExtendResult{Lease: lease, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// serverInfo is what Probe learns about the node's server.
type serverInfo struct {
	Version  string // redis_version, such as "7.0.15"
	Primary  bool   // the server is a primary (role:master)
	Replicas int    // replicas connected to it
	AOF      bool   // appendonly is enabled
	WaitAOF  bool   // the server offers WAITAOF (Redis 7.2 or later)
}

// Probe asks the node's server for its version, role, connected replicas and
// persistence, with one script run (INFO from Lua); on a Cluster, any one
// master answers. The strategy probes before its first write to each hash
// slot, on the master that serves it; Probe is for tests.
func (f *failover) Probe(ctx context.Context) (serverInfo, error) {
	return f.probe(ctx, nil)
}

// probe is Probe on the server that serves keys.
func (f *failover) probe(ctx context.Context, keys []string) (serverInfo, error) {
	cctx, cancel := f.cfg.withTimeout(ctx)
	defer cancel()
	r, err := probeScript.Run(cctx, f.node, keys)
	if err == nil && len(r) != 6 {
		err = errReply(r)
	}
	if err != nil {
		return serverInfo{}, &nodeError{Node: f.name, Op: "probe", Err: err}
	}
	info := serverInfo{
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
func (f *failover) prepare(ctx context.Context, keys []string) (driver.Wait, error) {
	slot := eval.Slot(keys[0])
	n := int(f.replicas[slot].Load()) - 1
	if n < 0 {
		info, err := f.probe(ctx, keys[:1])
		if err != nil {
			return driver.Wait{}, err
		}
		if !info.Primary {
			return driver.Wait{}, &nodeError{Node: f.name, Op: "probe", Err: errors.New("the server is a replica, not a primary")}
		}
		if f.fo.aof {
			switch {
			case !info.WaitAOF:
				return driver.Wait{}, fmt.Errorf("%w: WithWaitAOF: %s runs Redis %s, which has no WAITAOF (it needs Redis 7.2 or later)", dlm.ErrInvalid, f.name, info.Version)
			case f.fo.local && !info.AOF:
				return driver.Wait{}, fmt.Errorf("%w: WithWaitAOF(true): %s runs with appendonly off, so it cannot fsync locally", dlm.ErrInvalid, f.name)
			}
		}
		n = info.Replicas
		f.replicas[slot].Store(int32(n) + 1)
	}
	return f.wait(n), nil
}

// wait is the wait after a write on a primary with n replicas connected.
func (f *failover) wait(n int) driver.Wait {
	return driver.Wait{
		Replicas: f.fo.acks.need(max(n, f.fo.replicas)),
		Timeout:  f.fo.waitTimeout,
		AOF:      f.fo.aof,
		Local:    f.fo.local,
	}
}

// runWait runs wrapped followed by the wait w, and returns the
// single-instance part of the reply ({code, value}, as verdict reads it),
// the acknowledgements and the replicas the primary reported connected
// (failover_replicas.lua adds them). When the write succeeded (code
// replyGranted) but the wait asked for fewer replicas than the primary
// turned out to have (a replica joined), the write, which is idempotent,
// and a wait for the right count are sent once more.
func (f *failover) runWait(ctx context.Context, wrapped *eval.Script, w driver.Wait, keys []string, args ...string) ([]int64, driver.Acks, int, error) {
	for again := true; ; again = false {
		r, acks, err := wrapped.RunWait(ctx, f.node, w, keys, args...)
		if err == nil && len(r) != 3 {
			err = errReply(r)
		}
		if err != nil {
			return r, acks, -1, err
		}
		connected := int(r[2])
		f.replicas[eval.Slot(keys[0])].Store(int32(connected) + 1)
		if right := f.wait(connected); again && r[0] == replyGranted && acks.Replicas < right.Replicas && w.Replicas < right.Replicas {
			w = right
			continue
		}
		return r[:2], acks, connected, nil
	}
}

// checkAcks returns an *ackError when acks fall short of the policy.
func (f *failover) checkAcks(op, key string, w driver.Wait, acks driver.Acks, connected int) error {
	wanted := f.fo.acks.need(max(connected, f.fo.replicas))
	if acks.Replicas >= wanted && (!w.Local || acks.Local) {
		return nil
	}
	return &ackError{
		Op: op, Key: key, Acked: acks.Replicas, Wanted: wanted, Connected: connected,
		Policy: f.fo.acks, Timeout: f.fo.waitTimeout, AOF: w.AOF, LocalMissing: w.Local && !acks.Local,
	}
}
