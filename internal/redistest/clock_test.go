package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server's wall clock is the test's: TIME shows it, a jump forward
// expires keys early, and a rate above 1 makes it gain.
func TestClock(t *testing.T) {
	s, clock := StartClocked(t)
	c := s.Client(t)
	ctx := context.Background()
	serverAhead := func() time.Duration {
		before := time.Now()
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		return now.Sub(before)
	}
	assert.Less(t, serverAhead(), time.Minute, "starts at real time")

	clock.Jump(time.Hour)
	assert.Greater(t, serverAhead(), 59*time.Minute)
	assert.InDelta(t, float64(time.Hour), float64(clock.Offset()), float64(time.Second))

	require.NoError(t, c.Set(ctx, "k", "v", time.Minute).Err())
	clock.Jump(2 * time.Minute)
	assert.Equal(t, int64(0), c.Exists(ctx, "k").Val(), "a one-minute key is gone after a two-minute jump")

	clock.SetRate(1000)
	time.Sleep(2 * time.Millisecond) // two real milliseconds are two seconds of the server's
	assert.Greater(t, clock.Offset(), time.Hour+2*time.Minute+time.Second)
	assert.Greater(t, serverAhead(), time.Hour+2*time.Minute+time.Second)
}
