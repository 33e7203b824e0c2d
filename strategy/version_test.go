package strategy_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// Issue 51: dlm needs Redis 6.0 or later (SET KEEPTTL). On an older server
// (its Lua API, which the acquire script tells apart, on a real 6.0:
// strategy.Before60ForTest) every acquisition fails with an error that
// says so, not a Lua script error, and dlm.Permanent makes Lock return it
// at once rather than wait until its context ends; nothing is written.
// Over the single strategy with and without coalescing (concurrent calls
// may go in one batch, which runs the script in a pcall) and Redlock.
func TestBefore60Refused(t *testing.T) {
	b := redistest.Find(t, redistest.Redis60)
	strategy.Before60ForTest(t) // before the strategies are made: coalescing keeps the script
	c := redistest.StartBuild(t, b).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		make func() (driver.Strategy, error)
	}{
		{"single", func() (driver.Strategy, error) { return strategy.NewSingle(goredis.New(c)) }},
		{"single without coalescing", func() (driver.Strategy, error) {
			return strategy.NewSingle(goredis.New(c), strategy.WithCoalescing(false))
		}},
		{"redlock", func() (driver.Strategy, error) { return strategy.NewRedlock([]driver.Node{goredis.New(c)}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.make()
			require.NoError(t, err)
			m, err := dlm.New(s)
			require.NoError(t, err)
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Go(func() {
					_, errs[i] = m.Lock(ctx, tc.name+strconv.Itoa(i))
				})
			}
			wg.Wait()
			t.Logf("Lock: %v", errs[0])
			for _, err := range errs {
				require.Error(t, err)
				assert.ErrorIs(t, err, dlm.ErrNotAcquired)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "Lock returned at once, not when its context ended")
				assert.True(t, dlm.Permanent(err), "%v", err)
				assert.Contains(t, err.Error(), "dlm needs Redis 6.0 or later (SET KEEPTTL)")
				assert.NotContains(t, err.Error(), "Error running script", "the server's wrapping is read away")
				var re *driver.ReplyError
				if assert.True(t, errors.As(err, &re), "%v", err) {
					assert.Equal(t, "ERR", re.Code)
				}
			}
			assert.Zero(t, c.DBSize(ctx).Val(), "nothing was written")
		})
	}
}
