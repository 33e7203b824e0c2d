package config

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
)

// throwaway is a strategy written only to show what adding one takes: its
// own type, and one line in builders. It grants every lock with fence 1.
type throwaway struct{}

func (throwaway) Acquire(_ context.Context, _, _ string, ttl time.Duration) (driver.Lease, error) {
	return driver.Lease{Fence: 1, Until: time.Now().Add(ttl / 2)}, nil
}
func (s throwaway) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	return s.Acquire(ctx, key, token, ttl)
}
func (s throwaway) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(locks))
	for i := range out {
		out[i].Lease, out[i].Err = s.Acquire(ctx, locks[i].Key, locks[i].Token, ttl)
	}
	return out
}
func (throwaway) Release(context.Context, string, string) error { return nil }
func (throwaway) WatchRelease(context.Context, string, func()) (func(), error) {
	return nil, errors.ErrUnsupported
}

func TestAddingAStrategyIsOneLine(t *testing.T) {
	_, err := ParseURL("throwaway://127.0.0.1:1")
	require.ErrorIs(t, err, dlm.ErrInvalid, "unknown before it is registered")

	builders["throwaway"] = func(Config, []driver.Node) (driver.Strategy, error) { return throwaway{}, nil } // the one line
	defer delete(builders, "throwaway")

	cfg, err := ParseURL("throwaway://127.0.0.1:1?ttl=2s")
	require.NoError(t, err)
	s, err := cfg.NewStrategy()
	require.NoError(t, err)
	m, err := dlm.New(s, cfg.ManagerOptions()...)
	require.NoError(t, err)
	l, err := m.Lock(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), l.Fence())
	assert.Contains(t, (&Config{Strategy: "nope"}).Validate().Error(), "throwaway", "the error lists it among the strategies")
}
