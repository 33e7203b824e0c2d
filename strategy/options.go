package strategy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/echo"
)

// The options of the strategies' constructors: those every strategy takes,
// then the failover strategy's own.

// DefaultDriftFactor is the default share of the TTL taken off a lease's
// validity for clock drift between client and servers.
const DefaultDriftFactor = 0.01

// minDrift is added to the drift margin for the granularity of Redis expiry.
const minDrift = 2 * time.Millisecond

// An Option configures a strategy. A constructor rejects an option that does
// not apply to its strategy or whose value is bad.
type Option func(*config) error

type config struct {
	driftFactor float64
	timeout     time.Duration
	timeoutSet  bool            // WithTimeout was given
	maxTTL      time.Duration   // the amnesia guard; 0: off
	alone       bool            // WithCoalescing(false): every call goes out by itself
	failover    *failoverConfig // set by NewFailover; its options need it
}

func defaultConfig() config { return config{driftFactor: DefaultDriftFactor} }

// WithDriftFactor sets the share of the TTL taken off every lease for clock
// drift; the margin is TTL×f + 2ms. The default is DefaultDriftFactor (0.01).
// f must be in [0, 0.5).
func WithDriftFactor(f float64) Option {
	return func(c *config) error {
		if !(f >= 0 && f < 0.5) {
			return fmt.Errorf("%w: WithDriftFactor(%v): must be in [0, 0.5)", dlm.ErrInvalid, f)
		}
		c.driftFactor = f
		return nil
	}
}

// WithTimeout bounds every call to a node. For the single-instance strategy
// the default, 0, leaves the bound to the caller's context. For Redlock it is
// the per-node timeout and must be positive: a node that has not answered
// within it counts as failed. Without WithTimeout, Redlock's per-node
// timeout adapts to the nodes' latency (see NewRedlock).
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithTimeout(%v): must not be negative", dlm.ErrInvalid, d)
		}
		c.timeout, c.timeoutSet = d, true
		return nil
	}
}

// WithMaxTTL turns the amnesia guard on: d is the longest lease any client
// of these keys takes (every client must be configured alike), and a TTL
// above it is refused with ErrInvalid. A hash slot whose state a node lost
// — a restart without persistence, FLUSHALL, an empty replica promoted,
// eviction — grants nothing on that node until d has passed, so that no
// lease it forgot can still be running; and fences on a slot that lost its
// counter start again above the old ones. See the README's "Amnesia" section for
// how a node that lost its data is told from a new one, and what it costs.
// d must be positive and at most dlm.MaxTTL. By default the guard is off.
func WithMaxTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > dlm.MaxTTL {
			return fmt.Errorf("%w: WithMaxTTL(%v): must be positive and at most %v", dlm.ErrInvalid, d, dlm.MaxTTL)
		}
		c.maxTTL = d
		return nil
	}
}

// WithCoalescing(false) sends every call to a node by itself. By default
// concurrent calls bound for one node — acquisitions, extensions and
// releases of any keys, from any goroutine — may go out together while
// earlier calls are in flight: one pipelined round trip, over any driver,
// in which the calls of one script bound for one server (nodekit.Router
// says which) run as one script invocation. Whether they do is decided at
// run time: while more callers than run slots are in a node, it measures
// the calls completed per second with and without, and keeps the better.
// An uncontended call never waits for company and costs nothing here.
// Turn it off only to measure what it gains.
func WithCoalescing(on bool) Option {
	return func(c *config) error {
		c.alone = !on
		return nil
	}
}

func applyOptions(c *config, opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil Option", dlm.ErrInvalid)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// DefaultWaitTimeout is the default bound on how long the failover strategy
// waits for replicas to acknowledge a write.
const DefaultWaitTimeout = 100 * time.Millisecond

type failoverConfig struct {
	acks        AckPolicy
	waitTimeout time.Duration
	replicas    int // WithReplicas: the least replica count "all" and "majority" count
	aof, local  bool
}

// waits reports whether the strategy waits for anything after a write.
func (c *failoverConfig) waits() bool { return c != nil && (c.acks.kind != ackNone || c.aof) }

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

// parseAckPolicy parses the form String returns. The error matches
// dlm.ErrInvalid.
func parseAckPolicy(s string) (AckPolicy, error) {
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
		return AckPolicy{}, fmt.Errorf("%w: ack policy %s: want all, majority, none or a number ≥ 1", dlm.ErrInvalid, echo.Quote(s))
	}
	return AckN(n), nil
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (p AckPolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it reads the form
// String returns. The error matches dlm.ErrInvalid.
func (p *AckPolicy) UnmarshalText(b []byte) error {
	q, err := parseAckPolicy(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
