package strategy

import "time"

// DriftMarginForTest is the default drift margin of a lease of ttl.
func DriftMarginForTest(ttl time.Duration) time.Duration {
	c := defaultConfig()
	return c.driftMargin(ttl)
}
