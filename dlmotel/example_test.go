package dlmotel_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmotel"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	// An in-process Redis so that the example runs anywhere; use your own
	// client.
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()

	// In-memory providers, to print what they got; a program passes its
	// own, or none for the global ones.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	obs, err := dlmotel.New(dlmotel.WithMeterProvider(mp), dlmotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	node := obs.WrapNode(goredis.New(client), "redis-a") // reports to mp, as obs does
	single, err := strategy.NewSingle(node)
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(single, dlm.WithObserver(obs))
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		panic(err)
	}
	if _, err := m.TryLock(ctx, "orders:42"); err == nil {
		panic("taken twice")
	}
	if err := lock.Unlock(ctx); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, met := range sm.Metrics {
			switch d := met.Data.(type) {
			case metricdata.Histogram[float64]:
				if met.Name == dlmotel.AcquireDuration {
					for _, p := range d.DataPoints {
						outcome, _ := p.Attributes.Value("dlm.outcome")
						fmt.Println(met.Name, outcome.String(), p.Count)
					}
				}
			case metricdata.Sum[int64]:
				if met.Name == dlmotel.LocksHeld {
					fmt.Println(met.Name, d.DataPoints[0].Value)
				}
			}
		}
	}
	for _, s := range spans.Ended() {
		if s.Name() != dlmotel.SpanName {
			continue
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		nodes := 0
		for _, e := range s.Events() {
			if e.Name == "dlm.node" {
				nodes++
			}
		}
		fmt.Println(s.Name(), attrs["dlm.key"], attrs["dlm.outcome"], "node events:", nodes > 0)
	}
	// Unordered output:
	// dlm.lock.acquire.duration acquired 1
	// dlm.lock.acquire.duration busy 1
	// dlm.locks.held 0
	// dlm.Lock orders:42 acquired node events: true
	// dlm.Lock orders:42 busy node events: true
}
