package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// doctor compares the deployment's failover timing with what dlm run
// survives at the TTL in use: Redis' default Sentinel down-after (30s) is
// too long for dlm run's default TTL, a Cluster's default node timeout
// (15s) is not, and a 10s TTL is too short for it.
func TestDoctorFailoverTime(t *testing.T) {
	t.Parallel()
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1, DownAfter: 30 * time.Second, FailoverTimeout: 180 * time.Second})
	url := "sentinel://127.0.0.1:1," + strings.Join(topo.SentinelAddrs(), ",") + "/" + topo.Master // the first Sentinel is down
	_, out := runDLM(t, "doctor", "--timeout", "1s", "--url", url)
	assert.Contains(t, out, "warn down-after-milliseconds 30s, failover-timeout 3m0s (a failed failover is tried again after twice that): a failover takes about 32s, but dlm run at TTL 30s rides through only 23.4s and stops its command (exit 76); use ttl=45s or more (--ttl)", out)
	_, out = runDLM(t, "doctor", "--timeout", "1s", "--url", url+"?ttl=45s")
	assert.Contains(t, out, "ok   down-after-milliseconds 30s", out)
	assert.Contains(t, out, "dlm run at TTL 45s rides through up to 38.2s", out)
	// --ttl counts as ?ttl= does.
	_, out = runDLM(t, "doctor", "--timeout", "1s", "--ttl", "45s", "--url", url)
	assert.Contains(t, out, "ok   down-after-milliseconds 30s", out)
	assert.Contains(t, out, "dlm run at TTL 45s rides through up to 38.2s", out)

	cl := redistest.StartCluster(t, 1)
	require.NoError(t, cl[0].Client(t).ConfigSet(context.Background(), "cluster-node-timeout", "15000").Err())
	url = "cluster://" + cl[0].Addr
	_, out = runDLM(t, "doctor", "--url", url)
	assert.Contains(t, out, "ok   cluster-node-timeout 15s: a failover takes about 20.75s; dlm run at TTL 30s rides through up to 23.4s", out)
	_, out = runDLM(t, "doctor", "--url", url+"?ttl=10s")
	assert.Contains(t, out, "warn cluster-node-timeout 15s: a failover takes about 20.75s, but dlm run at TTL 10s rides through only 5.3s and stops its command (exit 76); use ttl=30s or more", out)
	_, out = runDLM(t, "doctor", "--ttl", "10s", "--url", url)
	assert.Contains(t, out, "warn cluster-node-timeout 15s: a failover takes about 20.75s, but dlm run at TTL 10s rides through only 5.3s and stops its command (exit 76); use ttl=30s or more", out)
}

// A replica that is connected but still waits for its first full sync
// (the primary's INFO says state=wait_bgsave, the replica "link down") is
// not counted in sync: doctor says so, and that ack all then refuses every
// lock, instead of "2 connected replica(s) ... ack all ok".
func TestDoctorReplicaNotInSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1})
	primary := topo.Primary.Client(t)
	// The next replica's full sync waits a minute for more replicas.
	require.NoError(t, primary.ConfigSet(ctx, "repl-diskless-sync", "yes").Err())
	require.NoError(t, primary.ConfigSet(ctx, "repl-diskless-sync-delay", "60").Err())
	late := redistest.Start(t)
	require.NoError(t, late.Client(t).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(topo.Primary.Port)).Err())
	require.Eventually(t, func() bool {
		info, err := primary.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "port="+strconv.Itoa(late.Port)+",state=wait_bgsave")
	}, 10*time.Second, 20*time.Millisecond)

	url := "sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + topo.Master + "?replicas=2"
	code, out := runDLM(t, "doctor", "--url", url)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "warn replica "+late.Addr+" is not in sync (state wait_bgsave", out)
	assert.Contains(t, out, "fail ack all asks 2 acknowledgement(s), but 1 replica(s) in sync (2 connected): every lock is refused", out)
	assert.NotContains(t, out, "ok   ack all", out)
	// The replica's own view, in its section.
	_, section, _ := strings.Cut(out, late.Addr+" (replica)")
	assert.Contains(t, section, "warn link to the primary down", out)
}

// The rule at the defaults and at its edges.
func TestRideThrough(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 23398*time.Millisecond, rideThrough(runDefaultTTL, runGrace(runDefaultTTL, defaultGrace), 0.01))
	// A TTL below 3s renews every TTL/3 and stops at TTL/3 before the end.
	assert.Equal(t, time.Second-2*time.Second/3-12*time.Millisecond-50*time.Millisecond-time.Second/12, rideThrough(time.Second, runGrace(time.Second, defaultGrace), 0.01))
	assert.Equal(t, 30*time.Second, ttlFor(22*time.Second, 0.01))
	assert.Equal(t, 45*time.Second, ttlFor(34*time.Second, 0.01))
}
