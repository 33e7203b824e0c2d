// Package dlmotel reports what a dlm.Manager's locks do as OpenTelemetry
// metrics and traces, through OpenTelemetry's API: New returns a
// dlm.Observer to pass to dlm.WithObserver, and its WrapNode wraps each Node so
// that every Lock's span shows what each node answered and node errors are
// counted by node. Package dlm itself imports only the standard library; a
// Manager without an Observer pays nothing for one.
//
// Wiring:
//
//	obs, err := dlmotel.New() // the global MeterProvider and TracerProvider, or WithMeterProvider(mp), ...
//	node := obs.WrapNode(goredis.New(client), "redis-a") // reports to New's providers
//	single, err := strategy.NewSingle(node)
//	m, err := dlm.New(single, dlm.WithObserver(obs))
//
// Instruments (meter "github.com/dlmgo/dlm/dlmotel", with this module's
// version as the scope's version: see ScopeVersion); durations are in
// seconds. The lock's key is never a metric attribute (it would make one
// series per key); it is a span attribute.
//
//	dlm.lock.acquire.duration  histogram      Lock/TryLock call, by dlm.outcome and dlm.try
//	dlm.lock.wait.duration     histogram      start of the call to start of its last attempt, same attributes
//	dlm.lock.hold.duration     histogram      acquisition to Unlock or loss, by dlm.end (released, lost)
//	dlm.locks.held             updowncounter  locks held now
//	dlm.lock.renewals          counter        renewals (auto-renewal and Extend), by dlm.outcome (ok, refused, error)
//	dlm.lock.losses            counter        leases ended without Unlock, by dlm.cause
//	dlm.node.errors            counter        failed node calls (Observer.WrapNode), by dlm.node and error.type
//
// dlm.outcome of an acquisition is acquired, busy (another owner holds the
// key), canceled (the caller's context ended first) or error. dlm.cause of
// a loss is renewal-refused, revoked, max-hold, expired or other (see
// LossCause).
//
// Traces: each Lock and TryLock is a span named "dlm.Lock" (attributes
// dlm.key, dlm.try, dlm.fence, dlm.attempts, dlm.outcome; status Error when
// it failed other than busy), the parent of whatever the strategy does
// under it. A node wrapped by Observer.WrapNode adds a "dlm.node" event to the span
// found in each call's context: the node's name, the operation, how many
// script calls, how many failed and the first error.
package dlmotel

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlmgo/dlm"
)

// ScopeName is the instrumentation scope of the Meter and Tracer.
const ScopeName = "github.com/dlmgo/dlm/dlmotel"

// ScopeVersion returns the version of the instrumentation scope: the
// version of this module the program was built with (v0.4.0, or a
// pseudo-version), as runtime/debug.ReadBuildInfo reports it; "" when
// unknown (a build from a checkout, whose version is "(devel)", one that
// replaces the module by a directory, or a binary without build
// information).
func ScopeVersion() string { return scopeVersion() }

var scopeVersion = sync.OnceValue(func() string {
	bi, _ := debug.ReadBuildInfo()
	return versionIn(bi)
})

// versionIn returns this module's version in bi (see ScopeVersion).
func versionIn(bi *debug.BuildInfo) string {
	if bi == nil {
		return ""
	}
	for _, m := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
		if m == nil || m.Path != ScopeName {
			continue
		}
		if r := m.Replace; r != nil {
			m = r // a directory has no version; a module of another path does
		}
		if m.Version == "(devel)" {
			return ""
		}
		return m.Version
	}
	return ""
}

// Instrument names.
const (
	AcquireDuration = "dlm.lock.acquire.duration"
	WaitDuration    = "dlm.lock.wait.duration"
	HoldDuration    = "dlm.lock.hold.duration"
	LocksHeld       = "dlm.locks.held"
	Renewals        = "dlm.lock.renewals"
	Losses          = "dlm.lock.losses"
	NodeErrors      = "dlm.node.errors"
)

// SpanName is the name of the span of a Lock or TryLock call.
const SpanName = "dlm.Lock"

// An Option configures New.
type Option func(*config)

type config struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// WithMeterProvider sets the MeterProvider; the default is the global one
// (otel.GetMeterProvider) at the time of New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the TracerProvider; the default is the global
// one (otel.GetTracerProvider) at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// meter returns the Meter of c's MeterProvider for this scope.
func (c config) meter() metric.Meter {
	return c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(ScopeVersion()))
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

// Histogram bucket bounds, in seconds: from half a millisecond (a lock
// taken in one round trip) to an hour (a lock held).
var buckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Observer is a dlm.Observer that records metrics and spans.
type Observer struct {
	meter                 metric.Meter // for WrapNode
	tracer                trace.Tracer
	acquire, wait, hold   metric.Float64Histogram
	held                  metric.Int64UpDownCounter
	renewals, losses      metric.Int64Counter
	outcomes              [2][nOutcomes][]metric.RecordOption // [try][outcome]
	released, lost        []metric.RecordOption
	renewOK, renewRefused []metric.AddOption
	renewError            []metric.AddOption
	lossBy                [nCauses][]metric.AddOption
}

var _ dlm.Observer = (*Observer)(nil)

// New returns an Observer that reports to the providers of opts. It fails
// only when an instrument cannot be created.
func New(opts ...Option) (*Observer, error) {
	c := newConfig(opts)
	meter := c.meter()
	o := &Observer{meter: meter, tracer: c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(ScopeVersion()))}
	var errs [7]error
	o.acquire, errs[0] = meter.Float64Histogram(AcquireDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of Lock and TryLock calls."), metric.WithExplicitBucketBoundaries(buckets...))
	o.wait, errs[1] = meter.Float64Histogram(WaitDuration, metric.WithUnit("s"),
		metric.WithDescription("Time a Lock or TryLock call waited before its last attempt."), metric.WithExplicitBucketBoundaries(buckets...))
	o.hold, errs[2] = meter.Float64Histogram(HoldDuration, metric.WithUnit("s"),
		metric.WithDescription("Time locks were held, until Unlock or their loss."), metric.WithExplicitBucketBoundaries(buckets...))
	o.held, errs[3] = meter.Int64UpDownCounter(LocksHeld, metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held."))
	o.renewals, errs[4] = meter.Int64Counter(Renewals, metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of held locks, by auto-renewal and Extend."))
	o.losses, errs[5] = meter.Int64Counter(Losses, metric.WithUnit("{lock}"),
		metric.WithDescription("Leases that ended without Unlock."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	for try := range 2 {
		for out := range nOutcomes {
			o.outcomes[try][out] = recordOpts(attribute.String("dlm.outcome", outcome(out).String()), attribute.Bool("dlm.try", try == 1))
		}
	}
	o.released = recordOpts(attribute.String("dlm.end", "released"))
	o.lost = recordOpts(attribute.String("dlm.end", "lost"))
	o.renewOK = addOpts(attribute.String("dlm.outcome", "ok"))
	o.renewRefused = addOpts(attribute.String("dlm.outcome", "refused"))
	o.renewError = addOpts(attribute.String("dlm.outcome", "error"))
	for c := range nCauses {
		o.lossBy[c] = addOpts(attribute.String("dlm.cause", LossCause(c).String()))
	}
	return o, nil
}

func recordOpts(kv ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

func addOpts(kv ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
}

// outcome is how a Lock or TryLock call ended.
type outcome int

const (
	acquired outcome = iota
	busy
	canceled
	failed
	nOutcomes
)

func (o outcome) String() string {
	return [...]string{"acquired", "busy", "canceled", "error"}[o]
}

// outcomeOf classifies the error of a Lock or TryLock call made with ctx.
func outcomeOf(ctx context.Context, err error) outcome {
	switch {
	case err == nil:
		return acquired
	case ctx.Err() != nil:
		return canceled
	case errors.Is(err, dlm.ErrHeld):
		return busy
	default:
		return failed
	}
}

// LockStart implements dlm.Observer: it starts the call's span.
func (o *Observer) LockStart(ctx context.Context, key string, try bool) (context.Context, func(dlm.LockDone)) {
	start := time.Now()
	ctx, span := o.tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("dlm.key", key), attribute.Bool("dlm.try", try)))
	return ctx, func(d dlm.LockDone) {
		took := time.Since(start)
		out := outcomeOf(ctx, d.Err)
		t := 0
		if try {
			t = 1
		}
		opts := o.outcomes[t][out]
		o.acquire.Record(ctx, took.Seconds(), opts...)
		o.wait.Record(ctx, d.Waited.Seconds(), opts...)
		if out == acquired {
			o.held.Add(ctx, 1)
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.String("dlm.outcome", out.String()), attribute.Int("dlm.attempts", d.Attempts))
			if d.Err == nil {
				span.SetAttributes(attribute.Int64("dlm.fence", int64(d.Fence)))
			} else if out != busy {
				span.RecordError(d.Err)
				span.SetStatus(codes.Error, d.Err.Error())
			}
		}
		span.End()
	}
}

// Renewed implements dlm.Observer.
func (o *Observer) Renewed(key string, err error) {
	opts := o.renewOK
	switch {
	case err == nil:
	case errors.Is(err, dlm.ErrNotHeld):
		opts = o.renewRefused
	default:
		opts = o.renewError
	}
	o.renewals.Add(context.Background(), 1, opts...)
}

// Lost implements dlm.Observer.
func (o *Observer) Lost(key string, cause error, held time.Duration) {
	ctx := context.Background()
	o.losses.Add(ctx, 1, o.lossBy[CauseOf(cause)]...)
	o.hold.Record(ctx, held.Seconds(), o.lost...)
	o.held.Add(ctx, -1)
}

// Released implements dlm.Observer.
func (o *Observer) Released(key string, held time.Duration, err error) {
	ctx := context.Background()
	o.hold.Record(ctx, held.Seconds(), o.released...)
	o.held.Add(ctx, -1)
}

// A LossCause classifies why a lease ended without Unlock (the dlm.cause
// attribute of dlm.lock.losses).
type LossCause int

const (
	// CauseOther: an end that is none of the below.
	CauseOther LossCause = iota
	// CauseRefused: a renewal or Extend found the lock no longer held for
	// its token (deleted, expired on the servers, or taken by another
	// owner): the cause matches dlm.ErrNotHeld.
	CauseRefused
	// CauseRevoked: an operator revoked the lock (dlm.ErrRevoked).
	CauseRevoked
	// CauseMaxHold: the maximum hold time of dlm.WithAutoRenew was reached
	// (dlm.ErrMaxHold).
	CauseMaxHold
	// CauseExpired: the validity ran out, because renewals failed or none
	// was made (dlm.ErrLost, and none of the above).
	CauseExpired
	nCauses
)

func (c LossCause) String() string {
	return [...]string{"other", "renewal-refused", "revoked", "max-hold", "expired"}[c]
}

// CauseOf classifies the cause of a loss (dlm.Observer's Lost, or
// context.Cause of a Lock's context).
func CauseOf(cause error) LossCause {
	switch {
	case errors.Is(cause, dlm.ErrRevoked): // before ErrNotHeld, which it matches too
		return CauseRevoked
	case errors.Is(cause, dlm.ErrNotHeld):
		return CauseRefused
	case errors.Is(cause, dlm.ErrMaxHold):
		return CauseMaxHold
	case errors.Is(cause, dlm.ErrLost):
		return CauseExpired
	default:
		return CauseOther
	}
}
