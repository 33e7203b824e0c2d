package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// dlm run, doctor and demo work on a Redis Cluster given as cluster://;
// doctor checks every master and replica, and tells a user who gave a
// Cluster node as single:// what to write instead.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterReplicas(t, 1, 1, 1)
	url := "cluster://" + cl.Masters[0].Addr

	// Keys on every master (each key's lock has fence 1 on its master).
	for i := range 6 {
		key := fmt.Sprintf("cluster-job-%d", i)
		code, out := runDLM(t, "run", "--url", url, "--key", key, "--", "sh", "-c", `echo "key=$DLM_KEY fence=$DLM_FENCE"`)
		require.Equal(t, 0, code, out)
		assert.Contains(t, out, "key="+key+" fence=1")
	}

	code, out := runDLM(t, "doctor", "--url", url)
	assert.Equal(t, 1, code, out) // AOF is off
	assert.Contains(t, out, "single strategy, "+url)
	assert.Contains(t, out, "ok   3 master(s) with slots, 3 replica(s)")
	for i, m := range cl.Masters {
		assert.Contains(t, out, m.Addr+" (master, slots ", out)
		assert.Contains(t, out, cl.Replicas[i][0].Addr+" (replica of "+m.Addr+")", out)
	}
	assert.Equal(t, 6, strings.Count(out, "ok   cluster_state ok"), out)
	assert.Equal(t, 6, strings.Count(out, "ok   all 16384 slots served"), out)
	assert.Equal(t, 3, strings.Count(out, "ok   link to the primary up"), out)
	assert.Contains(t, out, "warn 1 replica(s): replication is asynchronous, a failover can lose a held lock; consider the failover strategy (cluster://")

	// With the failover strategy, each master's replicas meet ack=all.
	code, out = runDLM(t, "doctor", "--url", url+"?strategy=failover&ack=all")
	assert.Equal(t, 1, code, out)
	assert.Equal(t, 3, strings.Count(out, "ok   ack all: 1 acknowledgement(s) per lock from 1 connected replica(s)"), out)

	// A Cluster node given as one server.
	code, out = runDLM(t, "doctor", "--url", "single://"+cl.Masters[0].Addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "fail Cluster mode: this node serves only its own slots, so locks on the others fail with MOVED; give the Cluster as cluster://"+cl.Masters[0].Addr)

	var demoOut, demoErr bytes.Buffer
	code = run(context.Background(), []string{"demo", "--strategy", "cluster", "--addr", cl.Masters[1].Addr, "--duration", "500ms"}, &demoOut, &demoErr)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", demoOut.String(), demoErr.String())
	assert.Contains(t, demoOut.String(), "over the Redis Cluster at "+cl.Masters[1].Addr)
	assert.Contains(t, demoOut.String(), "OK:")

	// dlm ls scans every master: locks held on keys of different masters
	// are all listed, with the waiting process counted on its shard channel.
	keys := []string{"held-a", "held-b", "held-c", "held-d"}
	for _, k := range keys {
		startDLM(t, "run", "--url", url, "--key", k, "--", "sleep", "30")
	}
	listed := func(waiters int) func() bool {
		return func() bool {
			code, out := runDLM(t, "ls", "--url", url, "--json", "held-*")
			var held []infoJSON
			if code != 0 || json.Unmarshal([]byte(out), &held) != nil || len(held) != len(keys) {
				return false
			}
			return held[0].Key == "held-a" && held[0].Waiters == waiters
		}
	}
	require.Eventually(t, listed(0), 10*time.Second, 50*time.Millisecond, "dlm ls did not list the locks held on every master")
	startDLM(t, "run", "--url", url, "--key", "held-a", "--wait", "30s", "--", "true")
	require.Eventually(t, listed(1), 10*time.Second, 50*time.Millisecond, "dlm ls did not count held-a's waiter")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr}})
	defer cc.Close()
	masters := map[string]bool{}
	for _, k := range keys {
		m, err := cc.MasterForKey(context.Background(), "dlm:{"+k+"}")
		require.NoError(t, err)
		masters[m.Options().Addr] = true
	}
	assert.Greater(t, len(masters), 1, "the keys live on more than one master")

	// A server not in cluster mode given as cluster://.
	code, out = runDLM(t, "doctor", "--timeout", "1s", "--url", "cluster://"+redistest.Start(t).Addr)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "cluster support disabled", out)
	assert.Contains(t, out, "fail no listed node gave the Cluster's nodes", out)

	// A replica down: doctor finds it unreachable.
	cl.Replicas[2][0].Kill(t)
	code, out = runDLM(t, "doctor", "--timeout", "1s", "--url", url)
	assert.Equal(t, 1, code, out)
	_, after, _ := strings.Cut(out, cl.Replicas[2][0].Addr+" (replica of "+cl.Masters[2].Addr+")")
	assert.Regexp(t, `fail unreachable|warn down \(flagged`, after, out) // before, or once, the Cluster flags it
}

func TestClusterUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--strategy", "cluster"},
		{"demo", "--strategy", "cluster", "--addr", "127.0.0.1:1,127.0.0.1:1"},
		{"run", "--url", "cluster://127.0.0.1:1?strategy=redlock", "--key", "k", "--", "true"},
		{"doctor", "--url", "cluster://127.0.0.1:1/m"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), args, &out, &errOut), "%v", args)
		assert.NotEmpty(t, errOut.String(), "%v", args)
	}
}
