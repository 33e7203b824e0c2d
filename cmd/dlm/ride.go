package main

import "time"

// How dlm run and dlm elect keep a lock through a failover (docs/failover-time.md):
// while the node that holds the lock is down, renewals fail and are retried,
// and the lease's validity (TTL minus the drift margin after the last
// confirmed renewal) keeps running. COMMAND gets SIGTERM once less than the
// grace period of it is left. So a failover that starts just before a due
// renewal is ridden through when the client reaches the new primary within
//
//	TTL − renewal period − grace − drift margin − retry spacing − stopMargin
//
// (rideThrough). With the defaults — TTL 30s, renewal every second, grace
// 5s — that is about 23s: above a Redis Cluster's failover with its default
// cluster-node-timeout of 15s (19s measured), below a Sentinel failover
// with its default down-after-milliseconds of 30s (31s measured).

// runDefaultTTL is the TTL of dlm run and dlm elect when neither --ttl nor
// the configuration gives one.
const runDefaultTTL = 30 * time.Second

// runRenewPeriod is how often dlm run renews its lock (more often for a TTL
// below three periods: every TTL/3). Frequent renewal keeps the last
// confirmed validity close to a full TTL whenever a failover starts; one
// small script per second costs a server nothing.
const runRenewPeriod = time.Second

// renewFraction is the WithAutoRenew fraction of dlm run at ttl.
func renewFraction(ttl time.Duration) float64 {
	return min(1.0/3, float64(runRenewPeriod)/float64(ttl))
}

// renewRetry mirrors the library's spacing of retries after a failed
// renewal (renew.go): at most 250ms, a quarter period below that.
func renewRetry(period time.Duration) time.Duration {
	return min(period/4, 250*time.Millisecond)
}

// defaultGrace is the default of dlm run's and dlm elect's --grace.
const defaultGrace = 5 * time.Second

// runGrace is the grace period dlm run applies: --grace, capped at TTL/3.
func runGrace(ttl, grace time.Duration) time.Duration { return min(grace, ttl/3) }

// rideThrough returns the longest outage of the lock's node, from the
// moment it stops answering to the moment the client reaches its
// replacement, that dlm run with ttl and grace (already capped) survives
// whenever the outage starts: its command is not stopped. driftFactor is
// the strategy's (strategy.DefaultDriftFactor unless configured).
func rideThrough(ttl, grace time.Duration, driftFactor float64) time.Duration {
	period := time.Duration(float64(ttl) * renewFraction(ttl))
	drift := time.Duration(float64(ttl)*driftFactor) + 2*time.Millisecond
	return ttl - period - grace - drift - renewRetry(period) - stopMargin
}
