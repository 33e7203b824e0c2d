// Package dlmslog logs what a dlm.Manager's locks do through log/slog: New
// returns a dlm.Observer to pass to dlm.WithObserver.
//
//	m, err := dlm.New(s, dlm.WithObserver(dlmslog.New(slog.Default())))
//
// Records (attributes: key, and as they apply try, fence, attempts, waited,
// took, held, error, cause):
//
//	Debug "dlm: lock acquired"         key try fence attempts waited took
//	Debug "dlm: lock not acquired"     key try attempts waited took error (busy, or the caller's context ended)
//	Warn  "dlm: lock failed"           key try attempts waited took error (any other error)
//	Debug "dlm: lock renewed"          key
//	Warn  "dlm: lock renewal failed"   key error
//	Debug "dlm: lock released"         key held
//	Warn  "dlm: lock release failed"   key held error
//	Error "dlm: lock lost"             key held cause (renewal refused, revoked, validity ran out)
//	Warn  "dlm: lock lost"             key held cause (maximum hold time reached: by design)
//
// Durations are time.Duration values. The logger's Enabled is checked
// first, so a disabled level costs next to nothing.
package dlmslog

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlmgo/dlm"
)

// Observer is a dlm.Observer that logs to a slog.Logger.
type Observer struct {
	l *slog.Logger
}

var _ dlm.Observer = (*Observer)(nil)

// New returns an Observer logging to l (slog.Default() when nil).
func New(l *slog.Logger) *Observer {
	if l == nil {
		l = slog.Default()
	}
	return &Observer{l: l}
}

// LockStart implements dlm.Observer.
func (o *Observer) LockStart(ctx context.Context, key string, try bool) (context.Context, func(dlm.LockDone)) {
	start := time.Now()
	return ctx, func(d dlm.LockDone) {
		took := time.Since(start)
		level, msg := slog.LevelDebug, "dlm: lock acquired"
		switch {
		case d.Err == nil:
		case ctx.Err() != nil || errors.Is(d.Err, dlm.ErrHeld):
			msg = "dlm: lock not acquired"
		default:
			level, msg = slog.LevelWarn, "dlm: lock failed"
		}
		if !o.l.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("key", key), slog.Bool("try", try)}
		if d.Err == nil {
			attrs = append(attrs, slog.Uint64("fence", d.Fence))
		}
		attrs = append(attrs, slog.Int("attempts", d.Attempts), slog.Duration("waited", d.Waited), slog.Duration("took", took))
		if d.Err != nil {
			attrs = append(attrs, slog.Any("error", d.Err))
		}
		o.l.LogAttrs(ctx, level, msg, attrs...)
	}
}

// Renewed implements dlm.Observer.
func (o *Observer) Renewed(key string, err error) {
	if err == nil {
		o.l.LogAttrs(context.Background(), slog.LevelDebug, "dlm: lock renewed", slog.String("key", key))
		return
	}
	o.l.LogAttrs(context.Background(), slog.LevelWarn, "dlm: lock renewal failed", slog.String("key", key), slog.Any("error", err))
}

// Lost implements dlm.Observer.
func (o *Observer) Lost(key string, cause error, held time.Duration) {
	level := slog.LevelError
	if errors.Is(cause, dlm.ErrMaxHold) {
		level = slog.LevelWarn
	}
	o.l.LogAttrs(context.Background(), level, "dlm: lock lost", slog.String("key", key), slog.Duration("held", held), slog.Any("cause", cause))
}

// Released implements dlm.Observer.
func (o *Observer) Released(key string, held time.Duration, err error) {
	if err == nil {
		o.l.LogAttrs(context.Background(), slog.LevelDebug, "dlm: lock released", slog.String("key", key), slog.Duration("held", held))
		return
	}
	o.l.LogAttrs(context.Background(), slog.LevelWarn, "dlm: lock release failed", slog.String("key", key), slog.Duration("held", held), slog.Any("error", err))
}
