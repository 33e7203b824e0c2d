package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/strategy"
)

// Estimates of how long a failover keeps a lock's node away, from the
// moment it dies until a client renews on its replacement (docs/failover-time.md;
// measured here on Redis 7.0.15: Cluster 3.6–3.8s at a node timeout of 2s
// and 19.1s at 15s; Sentinel 2.7s at down-after-milliseconds 1s and 31.6s
// at 30s).
func clusterFailoverTime(nodeTimeout time.Duration) time.Duration {
	// The node timeout, the spread of the failure reports, the election.
	return nodeTimeout + nodeTimeout/4 + 2*time.Second
}

func sentinelFailoverTime(downAfter time.Duration) time.Duration {
	// down-after-milliseconds, the vote, the promotion, the client's switch.
	return downAfter + 2*time.Second
}

// checkFailoverTime compares the time the deployment takes to fail over
// (a Cluster's cluster-node-timeout, the Sentinels' down-after-milliseconds)
// with what dlm run survives at the TTL in use (the config's, else dlm
// run's default) and its default grace: when the failover is longer, dlm
// run stops its command (exit 76) whenever a failover happens. Deployments
// without automatic failover are not checked.
func checkFailoverTime(ctx context.Context, cfg config.Config, timeout time.Duration, r *report) {
	var what string
	var failover time.Duration
	switch {
	case cfg.Cluster:
		nt, ok := clusterNodeTimeout(ctx, cfg, timeout)
		if !ok {
			r.section("Failover time")
			r.addf("warn", "cluster-node-timeout unknown (CONFIG GET refused or no node answered): a failover takes about the node timeout + 25%% + 2s; %s", rideText(cfg))
			return
		}
		what, failover = fmt.Sprintf("cluster-node-timeout %v", nt), clusterFailoverTime(nt)
	case cfg.Master != "":
		da, ft, ok := sentinelTimes(ctx, cfg, timeout)
		if !ok {
			r.section("Failover time")
			r.addf("warn", "no Sentinel gave down-after-milliseconds: a failover takes about it + 2s; %s", rideText(cfg))
			return
		}
		what, failover = fmt.Sprintf("down-after-milliseconds %v, failover-timeout %v (a failed failover is tried again after twice that)", da, ft), sentinelFailoverTime(da)
	default:
		return
	}
	r.section("Failover time")
	ttl, grace, df := rideParams(cfg)
	budget := rideThrough(ttl, grace, df)
	if budget >= failover {
		r.addf("ok", "%s: a failover takes about %v; dlm run at TTL %v rides through up to %v", what, failover, ttl, budget.Round(100*time.Millisecond))
		return
	}
	r.addf("warn", "%s: a failover takes about %v, but dlm run at TTL %v rides through only %v and stops its command (exit 76); use ttl=%v or more (--ttl), or fail over sooner",
		what, failover, ttl, max(budget, 0).Round(100*time.Millisecond), ttlFor(failover+2*time.Second, df))
}

// rideParams returns the TTL dlm run uses on cfg, its default grace at
// that TTL and the drift factor.
func rideParams(cfg config.Config) (ttl, grace time.Duration, driftFactor float64) {
	ttl = time.Duration(cfg.TTL)
	if ttl == 0 {
		ttl = runDefaultTTL
	}
	driftFactor = strategy.DefaultDriftFactor
	if cfg.DriftFactor != nil {
		driftFactor = *cfg.DriftFactor
	}
	return ttl, runGrace(ttl, defaultGrace), driftFactor
}

func rideText(cfg config.Config) string {
	ttl, grace, df := rideParams(cfg)
	return fmt.Sprintf("dlm run at TTL %v rides through up to %v", ttl, max(rideThrough(ttl, grace, df), 0).Round(100*time.Millisecond))
}

// ttlFor returns the shortest TTL, in whole 5s, at which dlm run with its
// default grace rides through an outage of d.
func ttlFor(d time.Duration, driftFactor float64) time.Duration {
	ttl := 5 * time.Second
	for rideThrough(ttl, runGrace(ttl, defaultGrace), driftFactor) < d && ttl < time.Hour {
		ttl += 5 * time.Second
	}
	return ttl
}

// clusterNodeTimeout asks the listed nodes, in turn, for
// cluster-node-timeout; the first answer counts.
func clusterNodeTimeout(ctx context.Context, cfg config.Config, timeout time.Duration) (time.Duration, bool) {
	for _, addr := range cfg.Addrs {
		c := serverClient(cfg, addr)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		v := configGet(cctx, c, "cluster-node-timeout")
		cancel()
		_ = c.Close()
		if ms, err := strconv.Atoi(v); err == nil {
			return time.Duration(ms) * time.Millisecond, true
		}
	}
	return 0, false
}

// sentinelTimes asks the Sentinels, in turn, for the master's
// down-after-milliseconds and failover-timeout; the first answer counts.
func sentinelTimes(ctx context.Context, cfg config.Config, timeout time.Duration) (downAfter, failoverTimeout time.Duration, ok bool) {
	for _, addr := range cfg.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: cfg.SentinelUsername, Password: cfg.SentinelPassword,
			DialTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true,
		})
		cctx, cancel := context.WithTimeout(ctx, timeout)
		m, err := sc.Master(cctx, cfg.Master).Result()
		cancel()
		_ = sc.Close()
		da, err1 := strconv.Atoi(m["down-after-milliseconds"])
		ft, err2 := strconv.Atoi(m["failover-timeout"])
		if err == nil && err1 == nil && err2 == nil {
			return time.Duration(da) * time.Millisecond, time.Duration(ft) * time.Millisecond, true
		}
	}
	return 0, 0, false
}
