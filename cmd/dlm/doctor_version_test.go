package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/internal/redistest"
)

// Issue 33, finding 7: doctor's findings fit the server's version, and a
// dead seed does not fail a healthy Cluster.
func TestDoctorClusterDeadSeedAndVersion(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterReplicas(t, 1, 1, 1)
	for _, group := range append([][]*redistest.Server{cl.Masters}, cl.Replicas...) {
		for _, s := range group { // nothing left to change: AOF with fsync always
			c := s.Client(t)
			require.NoError(t, c.ConfigSet(context.Background(), "appendonly", "yes").Err())
			require.NoError(t, c.ConfigSet(context.Background(), "appendfsync", "always").Err())
		}
	}
	dead := redistest.RefusedAddr(t)
	url := "cluster://" + dead + "," + cl.Masters[0].Addr + "?strategy=failover&ack=all"
	code, out := runDLM(t, "doctor", "--timeout", "1s", "--url", url)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   "+dead+": CLUSTER NODES:", out)
	assert.Contains(t, out, "ok   3 master(s) with slots, 3 replica(s)", out)
	// Redis 7.0 has no WAITAOF: no finding calls its absence "ok" or
	// advises wait_aof, which it cannot do.
	assert.NotContains(t, out, "command WAITAOF not available", out)
	assert.NotContains(t, out, "and wait_aof=replicas", out)

	// AOF off on a 7.0 replica: the advice does not name wait_aof as a cure.
	require.NoError(t, cl.Replicas[0][0].Client(t).ConfigSet(context.Background(), "appendonly", "no").Err())
	_, out = runDLM(t, "doctor", "--timeout", "1s", "--url", url)
	assert.Contains(t, out, "needs Redis 7.2; this is 7.", out)
	assert.NotContains(t, out, "and wait_aof=replicas", out)
}

// single:// given a Cluster node: dlm run's MOVED comes with a hint.
func TestRunSingleOnAClusterNodeHints(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	for i := range 6 { // some key's slot is on another master
		code, out := runDLM(t, "run", "--url", "single://"+cl[0].Addr, "--key", "k"+strings.Repeat("x", i), "--", "true")
		if code == 0 {
			continue
		}
		assert.Equal(t, exitNotLocked, code, out)
		assert.Contains(t, out, "MOVED")
		assert.Contains(t, out, "is a Redis Cluster node: give the Cluster as cluster://"+cl[0].Addr, out)
		return
	}
	t.Fatal("every key's slot was on the node given")
}

// Issue 51: a server below Redis 6.0 fails doctor's version check, saying
// that dlm needs 6.0 (SET KEEPTTL); 6.0 and later pass it.
func TestDoctorVersionMinimum(t *testing.T) {
	t.Parallel()
	f := versionFinding("5.0.14", config.Config{})
	assert.Equal(t, "fail", f.level)
	assert.Contains(t, f.text, "Redis 5.0.14: dlm needs Redis 6.0 or later (SET KEEPTTL)")
	for _, v := range []string{"6.0.16", "7.0.15", "7.2.4", "8.0.2"} {
		assert.Equal(t, "ok", versionFinding(v, config.Config{}).level, v)
	}
	assert.Equal(t, "fail", versionFinding("7.0.15", config.Config{WaitAOF: "replicas"}).level, "wait_aof on 7.0")
	assert.Equal(t, "warn", versionFinding("", config.Config{}).level)
}
