package dlmslog_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmslog"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// capture is a slog.Handler that keeps records.
type capture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r.Clone())
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

// entry is a record's level, message and attributes (durations as such).
type entry struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (c *capture) entries() []entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []entry
	for _, r := range c.records {
		e := entry{level: r.Level, msg: r.Message, attrs: map[string]any{}}
		r.Attrs(func(a slog.Attr) bool { e.attrs[a.Key] = a.Value.Any(); return true })
		out = append(out, e)
	}
	return out
}

func TestSlogEvents(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	h := &capture{}
	// A TTL long enough that no renewal runs in the background while "k"
	// is held: the only renewal logged for it is the Extend.
	m, err := dlm.New(s, dlm.WithObserver(dlmslog.New(slog.New(h))), dlm.WithTTL(time.Minute))
	require.NoError(t, err)
	ctx := context.Background()

	l, err := m.Lock(ctx, "k")
	require.NoError(t, err)
	_, err = m.TryLock(ctx, "k")
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	require.NoError(t, l.Extend(ctx, time.Second))
	require.NoError(t, l.Unlock(ctx))

	// A loss: the key is deleted behind the holder's back, and the next
	// renewal (every 180ms) finds it gone.
	short, err := dlm.New(s, dlm.WithObserver(dlmslog.New(slog.New(h))), dlm.WithTTL(600*time.Millisecond), dlm.WithAutoRenew(0.3, time.Minute))
	require.NoError(t, err)
	l, err = short.Lock(ctx, "gone")
	require.NoError(t, err)
	lockKey, _ := strategy.Keys("gone")
	require.EqualValues(t, 1, c.Del(ctx, lockKey).Val())
	<-l.Context().Done()

	// A frozen server: the next attempt fails after the strategy's timeout.
	s2, err := strategy.NewSingle(goredis.New(c), strategy.WithTimeout(100*time.Millisecond))
	require.NoError(t, err)
	m2, err := dlm.New(s2, dlm.WithObserver(dlmslog.New(slog.New(h))))
	require.NoError(t, err)
	srv.Freeze(t)
	_, err = m2.TryLock(ctx, "frozen")
	require.Error(t, err)
	srv.Thaw(t)

	es := h.entries()
	var msgs []string
	for _, e := range es {
		msgs = append(msgs, e.level.String()+" "+e.msg+" "+e.attrs["key"].(string))
	}
	require.Equal(t, []string{
		"DEBUG dlm: lock acquired k",
		"DEBUG dlm: lock not acquired k",
		"DEBUG dlm: lock renewed k",
		"DEBUG dlm: lock released k",
		"DEBUG dlm: lock acquired gone",
		"WARN dlm: lock renewal failed gone",
		"ERROR dlm: lock lost gone",
		"WARN dlm: lock failed frozen",
	}, msgs)

	acq := es[0].attrs
	assert.Equal(t, uint64(1), acq["fence"])
	assert.Equal(t, int64(1), acq["attempts"])
	assert.Equal(t, false, acq["try"])
	assert.IsType(t, time.Duration(0), acq["waited"])
	assert.IsType(t, time.Duration(0), acq["took"])
	assert.Equal(t, true, es[1].attrs["try"])
	assert.ErrorIs(t, es[1].attrs["error"].(error), dlm.ErrNotAcquired)
	assert.Greater(t, es[3].attrs["held"].(time.Duration), time.Duration(0))
	assert.ErrorIs(t, es[5].attrs["error"].(error), dlm.ErrNotHeld)
	cause := es[6].attrs["cause"].(error)
	assert.ErrorIs(t, cause, dlm.ErrLost)
	assert.ErrorIs(t, cause, dlm.ErrNotHeld)
	assert.Greater(t, es[6].attrs["held"].(time.Duration), time.Duration(0))
	assert.Error(t, es[7].attrs["error"].(error))
}
