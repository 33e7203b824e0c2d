package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Stopping three of five leaves no quorum: the demo says so and fails.
func TestDemoRedlockQuorumLost(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--duration", "1s", "--workers", "2", "--stop", "3", "--node-timeout", "2s"}, &out, &errOut)
	s := out.String()
	assert.Equal(t, 1, code, s)
	assert.Contains(t, s, "acquisitions after      0: the 2 remaining nodes are fewer than the quorum of 3")
	assert.Contains(t, s, "most holders at once    1 (must be 1)")
	assert.Contains(t, s, "FAILED")
}

func TestDemoRedlockRealServers(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--addr", strings.Join(addrs, ","), "--duration", "500ms", "--node-timeout", "2s"}, &out, &errOut)
	s := out.String()
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", s, errOut.String())
	assert.Contains(t, s, "Redlock strategy over Redis at "+strings.Join(addrs, ","))
	assert.NotContains(t, s, "nodes stopped", "servers given by address are not stopped")
	assert.Contains(t, s, "OK:")
}

func TestDemoSingleEmbedded(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--strategy", "single", "--duration", "500ms"}, &out, &errOut)
	assert.Equal(t, 0, code, out.String())
	assert.Contains(t, out.String(), "single-instance strategy over 1 embedded Redis node")
}

func TestDemoStrategyUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--strategy", "paxos"},
		{"--strategy", "single", "--addr", "127.0.0.1:1,127.0.0.1:2"},
		{"--nodes", "0"},
		{"--nodes", "3", "--stop", "4"},
		{"--node-timeout", "0s"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), append([]string{"demo"}, args...), &out, &errOut), "%v", args)
		assert.NotEmpty(t, errOut.String(), "%v", args)
	}
}
