package dlmslog_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmslog"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

func Example() {
	// An in-process Redis so that the example runs anywhere.
	srv := dlmtest.NewServer()
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)

	// Text records on stdout, without the time and durations (which vary);
	// a program uses its own logger.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Value.Kind() == slog.KindDuration {
				return slog.Attr{}
			}
			return a
		},
	}))
	single, err := strategy.NewSingle(node)
	if err != nil {
		panic(err)
	}
	m, err := dlm.New(single, dlm.WithObserver(dlmslog.New(logger)))
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		panic(err)
	}
	if err := lock.Unlock(ctx); err != nil {
		panic(err)
	}
	// Output:
	// level=DEBUG msg="dlm: lock acquired" key=orders:42 try=false fence=1 attempts=1
	// level=DEBUG msg="dlm: lock released" key=orders:42
}
