package dlmotel_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmotel"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// rig is a Manager over a real redis-server, observed by dlmotel into an
// in-memory metric reader and span recorder.
type rig struct {
	m      *dlm.Manager
	srv    *redistest.Server
	client *redis.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newBareRig(t *testing.T) *rig {
	r := &rig{srv: redistest.Start(t), reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = r.mp.Shutdown(context.Background()); _ = r.tp.Shutdown(context.Background()) })
	return r
}

func newRig(t *testing.T, sopts []strategy.Option, opts ...dlm.Option) *rig {
	t.Helper()
	r := newBareRig(t)
	r.client = r.srv.Client(t)
	r.m = r.manager(t, r.client, sopts, opts...)
	return r
}

// manager builds a Manager over client, its node wrapped as "redis-a".
func (r *rig) manager(t *testing.T, client *redis.Client, sopts []strategy.Option, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	obs, err := dlmotel.New(dlmotel.WithMeterProvider(r.mp), dlmotel.WithTracerProvider(r.tp))
	require.NoError(t, err)
	node := obs.WrapNode(goredis.New(client), "redis-a")
	s, err := strategy.NewSingle(node, sopts...)
	require.NoError(t, err)
	m, err := dlm.New(s, append([]dlm.Option{dlm.WithObserver(obs)}, opts...)...)
	require.NoError(t, err)
	return m
}

// metrics collects the named instrument's data.
func (r *rig) metric(t *testing.T, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.String() != v {
			return false
		}
	}
	return true
}

// count is the sum of a counter's points, or of a histogram's counts,
// whose attributes include want.
func (r *rig) count(t *testing.T, name string, want map[string]string) int64 {
	t.Helper()
	var n int64
	switch d := r.metric(t, name).(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				n += p.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				n += int64(p.Count)
			}
		}
	case nil:
	default:
		t.Fatalf("%s: unexpected data %T", name, d)
	}
	return n
}

func (r *rig) lockSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == dlmotel.SpanName {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func nodeEvents(s sdktrace.ReadOnlySpan) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range s.Events() {
		if e.Name == "dlm.node" {
			out = append(out, e)
		}
	}
	return out
}

func eventAttr(e sdktrace.Event, key string) string {
	for _, kv := range e.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// eventually waits up to 5s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOtelAcquireBusyRelease(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	l, err := r.m.Lock(ctx, "orders:42")
	require.NoError(t, err)

	assert.EqualValues(t, 1, r.count(t, dlmotel.AcquireDuration, map[string]string{"dlm.outcome": "acquired", "dlm.try": "false"}))
	assert.EqualValues(t, 1, r.count(t, dlmotel.WaitDuration, map[string]string{"dlm.outcome": "acquired"}))
	assert.EqualValues(t, 1, r.count(t, dlmotel.LocksHeld, nil))

	_, err = r.m.TryLock(ctx, "orders:42")
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	assert.EqualValues(t, 1, r.count(t, dlmotel.AcquireDuration, map[string]string{"dlm.outcome": "busy", "dlm.try": "true"}))
	assert.EqualValues(t, 2, r.count(t, dlmotel.AcquireDuration, nil))
	assert.EqualValues(t, 1, r.count(t, dlmotel.LocksHeld, nil), "a busy TryLock holds nothing")

	require.NoError(t, l.Unlock(ctx))
	assert.EqualValues(t, 0, r.count(t, dlmotel.LocksHeld, nil))
	assert.EqualValues(t, 1, r.count(t, dlmotel.HoldDuration, map[string]string{"dlm.end": "released"}))
	assert.EqualValues(t, 0, r.count(t, dlmotel.Losses, nil))
	assert.EqualValues(t, 0, r.count(t, dlmotel.NodeErrors, nil))

	// The metrics carry no key; the spans do.
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.reader.Collect(ctx, &rm))
	assert.NotContains(t, fmt.Sprintf("%+v", rm), "orders:42")

	spans := r.lockSpans()
	require.Len(t, spans, 2)
	acq, bus := spans[0], spans[1]
	assert.Equal(t, "orders:42", attr(acq, "dlm.key"))
	assert.Equal(t, "acquired", attr(acq, "dlm.outcome"))
	assert.Equal(t, "1", attr(acq, "dlm.attempts"))
	assert.Equal(t, strconv.FormatUint(l.Fence(), 10), attr(acq, "dlm.fence"))
	assert.Equal(t, codes.Unset, acq.Status().Code)
	ev := nodeEvents(acq)
	require.NotEmpty(t, ev, "the node's call is an event of the Lock span")
	assert.Equal(t, "redis-a", eventAttr(ev[0], "dlm.node"))
	assert.Equal(t, "1", eventAttr(ev[0], "dlm.calls"))
	assert.Equal(t, "0", eventAttr(ev[0], "dlm.failed"))

	assert.Equal(t, "busy", attr(bus, "dlm.outcome"))
	assert.Equal(t, "true", attr(bus, "dlm.try"))
	assert.Equal(t, codes.Unset, bus.Status().Code, "busy is not an error")
	assert.NotEmpty(t, nodeEvents(bus))
}

func TestOtelWaitAndCanceled(t *testing.T) {
	r := newRig(t, nil, dlm.WithRetryDelay(time.Millisecond, 50*time.Millisecond))
	ctx := context.Background()
	first, err := r.m.Lock(ctx, "k")
	require.NoError(t, err)

	// A Lock that waits 200ms for the holder.
	go func() { time.Sleep(200 * time.Millisecond); _ = first.Unlock(ctx) }()
	second, err := r.m.Lock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, second.Unlock(ctx))

	spans := r.lockSpans()
	require.Len(t, spans, 2)
	attempts, err := strconv.Atoi(attr(spans[1], "dlm.attempts"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, attempts, 2)
	d, ok := r.metric(t, dlmotel.WaitDuration).(metricdata.Histogram[float64])
	require.True(t, ok)
	var maxWait float64
	for _, p := range d.DataPoints {
		if v, ok := p.Max.Value(); ok {
			maxWait = max(maxWait, v)
		}
	}
	assert.Greater(t, maxWait, 0.15, "the waiting Lock's wait is recorded")

	// A Lock whose context ends while it waits.
	held, err := r.m.Lock(ctx, "k")
	require.NoError(t, err)
	defer held.Unlock(ctx)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = r.m.Lock(cctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.EqualValues(t, 1, r.count(t, dlmotel.AcquireDuration, map[string]string{"dlm.outcome": "canceled"}))
	spans = r.lockSpans()
	require.Len(t, spans, 4)
	assert.Equal(t, "canceled", attr(spans[3], "dlm.outcome"))
	assert.Equal(t, codes.Error, spans[3].Status().Code)
}

func TestOtelLossRenewalRefused(t *testing.T) {
	r := newRig(t, nil, dlm.WithTTL(600*time.Millisecond), dlm.WithAutoRenew(0.3, time.Minute))
	ctx := context.Background()
	l, err := r.m.Lock(ctx, "k")
	require.NoError(t, err)
	eventually(t, "a renewal", func() bool {
		return r.count(t, dlmotel.Renewals, map[string]string{"dlm.outcome": "ok"}) >= 1
	})

	// Delete the lock behind its holder's back: the next renewal is refused.
	lockKey, _ := strategy.Keys("k")
	require.EqualValues(t, 1, r.client.Del(ctx, lockKey).Val())
	select {
	case <-l.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's context did not end")
	}
	require.ErrorIs(t, context.Cause(l.Context()), dlm.ErrNotHeld)
	assert.EqualValues(t, 1, r.count(t, dlmotel.Renewals, map[string]string{"dlm.outcome": "refused"}))
	assert.EqualValues(t, 1, r.count(t, dlmotel.Losses, map[string]string{"dlm.cause": "renewal-refused"}))
	assert.EqualValues(t, 1, r.count(t, dlmotel.Losses, nil))
	assert.EqualValues(t, 1, r.count(t, dlmotel.HoldDuration, map[string]string{"dlm.end": "lost"}))
	assert.EqualValues(t, 0, r.count(t, dlmotel.LocksHeld, nil))

	// Unlocking the lost lock reports nothing more.
	require.ErrorIs(t, l.Unlock(ctx), dlm.ErrNotHeld)
	assert.EqualValues(t, 0, r.count(t, dlmotel.LocksHeld, nil))
	assert.EqualValues(t, 1, r.count(t, dlmotel.HoldDuration, nil))
}

func TestOtelLossExpiredAndMaxHold(t *testing.T) {
	r := newRig(t, nil, dlm.WithTTL(200*time.Millisecond))
	ctx := context.Background()
	// No renewal, nobody looks at the lock: it is reported lost when its
	// validity runs out all the same.
	l, err := r.m.Lock(ctx, "expires")
	require.NoError(t, err)
	eventually(t, "the loss", func() bool { return r.count(t, dlmotel.Losses, nil) == 1 })
	assert.EqualValues(t, 1, r.count(t, dlmotel.Losses, map[string]string{"dlm.cause": "expired"}))
	assert.EqualValues(t, 0, r.count(t, dlmotel.LocksHeld, nil))
	_ = l.Unlock(ctx)
	assert.EqualValues(t, 0, r.count(t, dlmotel.LocksHeld, nil))

	capped := r.manager(t, r.client, nil, dlm.WithTTL(300*time.Millisecond), dlm.WithAutoRenew(0.3, 200*time.Millisecond))
	l, err = capped.Lock(ctx, "capped")
	require.NoError(t, err)
	<-l.Context().Done()
	assert.ErrorIs(t, context.Cause(l.Context()), dlm.ErrMaxHold)
	eventually(t, "the max-hold loss", func() bool {
		return r.count(t, dlmotel.Losses, map[string]string{"dlm.cause": "max-hold"}) == 1
	})
	assert.EqualValues(t, 2, r.count(t, dlmotel.Losses, nil))
}

func TestOtelNodeErrors(t *testing.T) {
	r := newRig(t, []strategy.Option{strategy.WithTimeout(100 * time.Millisecond)})
	ctx := context.Background()
	l, err := r.m.Lock(ctx, "k") // the connection is open
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	r.srv.Freeze(t)
	_, err = r.m.TryLock(ctx, "k")
	require.Error(t, err)
	assert.GreaterOrEqual(t, r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "redis-a", "error.type": "timeout"}), int64(1))
	assert.EqualValues(t, 1, r.count(t, dlmotel.AcquireDuration, map[string]string{"dlm.outcome": "error"}))
	spans := r.lockSpans()
	failed := spans[len(spans)-1]
	assert.Equal(t, "error", attr(failed, "dlm.outcome"))
	assert.Equal(t, codes.Error, failed.Status().Code)
	ev := nodeEvents(failed)
	require.NotEmpty(t, ev)
	assert.Equal(t, "redis-a", eventAttr(ev[0], "dlm.node"))
	assert.Equal(t, "1", eventAttr(ev[0], "dlm.failed"))
	assert.NotEmpty(t, eventAttr(ev[0], "error.message"))

	// Killed: refused connections (or, when the client's dial retries
	// outlast the strategy's timeout, a timeout).
	before := r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "redis-a"})
	r.srv.Kill(t)
	_, err = r.m.TryLock(ctx, "k")
	require.Error(t, err)
	assert.Greater(t, r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "redis-a"}), before)
	assert.Zero(t, r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "redis-a", "error.type": "canceled"}))
}

// Calls that the strategy coalesces into one round trip still add their
// events to each caller's span: a delay on the wire keeps the node's two
// run slots busy, so the other callers' acquisitions go out in batches.
func TestOtelCoalescedCallsReachEachSpan(t *testing.T) {
	r := newBareRig(t)
	proxy := redistest.StartProxy(t, r.srv.Addr)
	proxy.SetDelay(20 * time.Millisecond)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr, PoolSize: 32})
	t.Cleanup(func() { client.Close() })
	r.m = r.manager(t, client, nil)

	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			l, err := r.m.TryLock(ctx, "key-"+strconv.Itoa(i))
			if err != nil {
				errs <- err
				return
			}
			errs <- l.Unlock(ctx)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	spans := r.lockSpans()
	require.Len(t, spans, n)
	batched := 0
	for _, s := range spans {
		// One event per round trip (two when the script was not cached
		// yet: EVALSHA, then EVAL), each of the caller's own call.
		ev := nodeEvents(s)
		assert.NotEmpty(t, ev, "span of %s", attr(s, "dlm.key"))
		for _, e := range ev {
			assert.Equal(t, "1", eventAttr(e, "dlm.calls"), "span of %s", attr(s, "dlm.key"))
			if b, _ := strconv.Atoi(eventAttr(e, "dlm.batch")); b > 1 {
				batched++
			}
		}
	}
	assert.Greater(t, batched, 0, "calls were coalesced")
}

func TestOtelCauseOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: %w", dlm.ErrLost, dlm.ErrNotHeld), "renewal-refused"},
		{fmt.Errorf("%w: %w: %w", dlm.ErrLost, dlm.ErrNotHeld, dlm.ErrRevoked), "revoked"},
		{fmt.Errorf("%w: %w", dlm.ErrLost, dlm.ErrMaxHold), "max-hold"},
		{fmt.Errorf("%w: %w", dlm.ErrLost, context.DeadlineExceeded), "expired"},
		{errors.New("something else"), "other"},
	} {
		assert.Equal(t, tc.want, dlmotel.CauseOf(tc.err).String(), "%v", tc.err)
	}
}

// A Redlock span has one event per master, each with its name. Redlock
// returns once a quorum granted: a frozen master's call ends after the
// span did, so it is not on the span, but it is counted under its name.
func TestOtelRedlockNodeEvents(t *testing.T) {
	r := newBareRig(t)
	srvs := []*redistest.Server{r.srv, redistest.Start(t), redistest.Start(t)}
	obs, err := dlmotel.New(dlmotel.WithMeterProvider(r.mp), dlmotel.WithTracerProvider(r.tp))
	require.NoError(t, err)
	var nodes []driver.Node
	for i, srv := range srvs {
		nodes = append(nodes, obs.WrapNode(goredis.New(srv.Client(t)), "master-"+strconv.Itoa(i)))
	}
	s, err := strategy.NewRedlock(nodes, strategy.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	m, err := dlm.New(s, dlm.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()

	l, err := m.Lock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	srvs[2].Freeze(t)
	l, err = m.Lock(ctx, "k") // a quorum of two
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	time.Sleep(200 * time.Millisecond) // past the per-node timeout
	srvs[2].Thaw(t)

	spans := r.lockSpans()
	require.Len(t, spans, 2)
	for i, s := range spans {
		failed := map[string]string{}
		for _, e := range nodeEvents(s) {
			failed[eventAttr(e, "dlm.node")] = eventAttr(e, "dlm.failed")
		}
		want := map[string]string{"master-0": "0", "master-1": "0", "master-2": "0"}
		if i == 1 {
			delete(want, "master-2")
		}
		assert.Equal(t, want, failed, "span %d: failed calls by master", i)
	}
	t.Logf("master-2's errors: %d timeout, %d canceled, %d other",
		r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "master-2", "error.type": "timeout"}),
		r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "master-2", "error.type": "canceled"}),
		r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "master-2", "error.type": "other"}))
	assert.GreaterOrEqual(t, r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "master-2"}), int64(1))
	assert.Zero(t, r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "master-0"}))
}

// Issue 51: the node of the Observer's WrapNode reports to the providers
// given to New, as docs/observability.md wires it, not to the global
// ones: a failed call counts in New's MeterProvider. The instruments'
// scope is named ScopeName and carries the module's version
// (ScopeVersion).
func TestOtelWrapNodeUsesNewsProviders(t *testing.T) {
	global := sdkmetric.NewManualReader()
	gmp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(global))
	defer func() { _ = gmp.Shutdown(context.Background()) }()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(gmp)
	defer otel.SetMeterProvider(prev)

	r := newBareRig(t)
	obs, err := dlmotel.New(dlmotel.WithMeterProvider(r.mp), dlmotel.WithTracerProvider(r.tp))
	require.NoError(t, err)
	node := obs.WrapNode(goredis.New(r.srv.Client(t)), "redis-a")
	s, err := strategy.NewSingle(node, strategy.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	m, err := dlm.New(s, dlm.WithObserver(obs))
	require.NoError(t, err)
	r.srv.Kill(t)
	_, err = m.TryLock(context.Background(), "k")
	require.Error(t, err)

	assert.Positive(t, r.count(t, dlmotel.NodeErrors, map[string]string{"dlm.node": "redis-a"}), "counted in New's MeterProvider")
	var rm metricdata.ResourceMetrics
	require.NoError(t, global.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, met := range sm.Metrics {
			assert.NotEqual(t, dlmotel.NodeErrors, met.Name, "nothing goes to the global MeterProvider")
		}
	}

	require.NoError(t, r.reader.Collect(context.Background(), &rm))
	require.NotEmpty(t, rm.ScopeMetrics)
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, dlmotel.ScopeName, sm.Scope.Name)
		assert.Equal(t, dlmotel.ScopeVersion(), sm.Scope.Version)
	}
	for _, span := range r.spans.Ended() {
		assert.Equal(t, dlmotel.ScopeVersion(), span.InstrumentationScope().Version)
	}
}
