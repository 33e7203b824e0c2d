package dlmotel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmotel"
	"github.com/dlmgo/dlm/dlmslog"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// BenchmarkLockUnlock is TryLock+Unlock against a real redis-server (see
// redistest.BenchLockUnlock: serial on one key, parallel on distinct keys)
// by observer: none; otel, dlmotel over the OpenTelemetry SDK (a
// MeterProvider with a reader that is never collected, a TracerProvider
// that samples every span and exports none); otel-unsampled, the same
// with a TracerProvider that samples no span (metrics only); otel+node,
// otel with the node wrapped by the Observer's WrapNode; slog, dlmslog over a text handler at Info, so
// that the Debug records of a lock that is taken and released are off.
// Compare with benchstat -col /observer.
func BenchmarkLockUnlock(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts func(b *testing.B) (wrap func(driver.Node) driver.Node, obs dlm.Observer)
	}{
		{"none", func(*testing.B) (func(driver.Node) driver.Node, dlm.Observer) { return nil, nil }},
		{"otel", func(b *testing.B) (func(driver.Node) driver.Node, dlm.Observer) {
			return nil, benchOtel(b, sdktrace.AlwaysSample())
		}},
		{"otel-unsampled", func(b *testing.B) (func(driver.Node) driver.Node, dlm.Observer) {
			return nil, benchOtel(b, sdktrace.NeverSample())
		}},
		{"otel+node", func(b *testing.B) (func(driver.Node) driver.Node, dlm.Observer) {
			obs := benchOtel(b, sdktrace.AlwaysSample())
			return func(n driver.Node) driver.Node { return obs.WrapNode(n, "redis-a") }, obs
		}},
		{"slog", func(*testing.B) (func(driver.Node) driver.Node, dlm.Observer) {
			return nil, dlmslog.New(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})))
		}},
	} {
		b.Run("observer="+tc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 128, ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			wrap, obs := tc.opts(b)
			var n driver.Node = goredis.New(c)
			if wrap != nil {
				n = wrap(n)
			}
			s, err := strategy.NewSingle(n)
			if err != nil {
				b.Fatal(err)
			}
			opts := []dlm.Option{dlm.WithTTL(10 * time.Second)}
			if obs != nil {
				opts = append(opts, dlm.WithObserver(obs))
			}
			m, err := dlm.New(s, opts...)
			if err != nil {
				b.Fatal(err)
			}
			redistest.BenchLockUnlock(b, m)
		})
	}
}

var benchMP *sdkmetric.MeterProvider

func benchOtel(b *testing.B, sampler sdktrace.Sampler) *dlmotel.Observer {
	benchMP = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	b.Cleanup(func() { _ = benchMP.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	obs, err := dlmotel.New(dlmotel.WithMeterProvider(benchMP), dlmotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	return obs
}
