package dlmtest

import (
	"sync"
	"time"
)

// A Clock is a server's clock: the base time (time.Now, virtual under
// testing/synctest) run at a rate from a starting reading. Keys expire,
// TIME answers and uptime counts by it; the delays of faults and WAIT's
// timeout count in base time. Its methods are safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	base time.Time // base time at the last change
	at   time.Time // the clock's reading then
	rate float64
}

func newClock() *Clock {
	now := time.Now().Round(0)
	return &Clock{base: now, at: now, rate: 1}
}

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now(time.Now().Round(0))
}

func (c *Clock) now(base time.Time) time.Time {
	return c.at.Add(time.Duration(float64(base.Sub(c.base)) * c.rate))
}

// SetRate makes the clock run at rate times the base time from now on
// (1: in step, 1.1: 10% fast, 0: stopped); the reading does not jump.
func (c *Clock) SetRate(rate float64) {
	if rate < 0 {
		panic("dlmtest: negative clock rate")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	base := time.Now().Round(0)
	c.at, c.base, c.rate = c.now(base), base, rate
}

// Jump moves the clock's reading by d (forward when positive). Keys whose
// expiry the new reading passed are gone, as on a server whose wall clock
// jumped.
func (c *Clock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

// Offset returns how far the clock is from the base time now.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	base := time.Now().Round(0)
	return c.now(base).Sub(base)
}
