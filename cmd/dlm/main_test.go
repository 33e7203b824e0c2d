package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/internal/redistest"
)

// The default demo: Redlock over five embedded nodes, two stopped halfway.
// Under the race detector on a loaded machine an embedded node can take
// hundreds of milliseconds to answer: a generous per-node timeout keeps such
// a node in the quorum (a timed-out release would count as an error), and
// the run is long enough that each half sees acquisitions even when a call
// to a live node stalls for that timeout right after the stop (seen under
// load: go-redis blocked reading a connection to a live miniredis node).
//
// What every run must show is the lock's guarantee: one holder at a time,
// fences strictly increasing, and the lock working on the three nodes
// left. That no call failed at all depends on timing: on a machine loaded
// to 15 on 2 cores an acquisition that a caller gave up on left its grant
// on a node, which refused an Unlock's hand-off until the 1s TTL ended
// (the demo then reports an error and fails). So the demo must also run
// clean, "OK:", but in one of up to three runs; a run that failed only
// because a call failed is logged and run again.
func TestDemoEmbedded(t *testing.T) {
	t.Parallel()
	for try := 1; ; try++ {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"demo", "--duration", "5s", "--workers", "3", "--node-timeout", "2s"}, &out, &errOut)
		s := out.String()
		assert.Contains(t, s, "Redlock strategy over 5 embedded Redis nodes")
		assert.Contains(t, s, "quorum 3")
		assert.Contains(t, s, "halfway through, 2 of the 5 nodes stop")
		assert.Contains(t, s, "nodes stopped           at 2.5s: node 2 (127.0.0.1:")
		assert.Contains(t, s, "the lock kept working on the 3 remaining nodes (quorum 3)")
		assert.Contains(t, s, "most holders at once    1 (must be 1)")
		assert.Contains(t, s, "strictly increasing: yes")
		assert.Contains(t, s, "(must equal acquisitions: yes)")
		if code == 0 && strings.Contains(s, "OK:") && !strings.Contains(s, "errors") {
			return
		}
		if try == 3 || !strings.Contains(s, "FAILED: the lock held (one holder at a time, every fence larger than the last), but not every call succeeded") {
			t.Fatalf("run %d: exit %d, want 0 and OK:\nstdout:\n%s\nstderr:\n%s", try, code, s, errOut.String())
		}
		t.Logf("run %d: a call failed, the lock held; run again:\n%s", try, s)
	}
}

func TestDemoRealServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--addr", srv.Addr, "--duration", "500ms"}, &out, &errOut)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "Redis at "+srv.Addr)
	assert.Contains(t, out.String(), "OK:")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), nil, &out, &errOut))
	assert.Equal(t, 2, run(context.Background(), []string{"nope"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `unknown command "nope"`)
	assert.Equal(t, 2, run(context.Background(), []string{"demo", "--workers", "0"}, &out, &errOut))
	assert.Equal(t, 2, run(context.Background(), []string{"demo", "--ttl", "0s"}, &out, &errOut))
}

// A server nobody listens on: the demo reports errors and fails.
func TestDemoUnreachable(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--addr", "127.0.0.1:1", "--duration", "3s"}, &out, &errOut)
	assert.Equal(t, 1, code, out.String())
	assert.Contains(t, out.String(), "FAILED")
	assert.Contains(t, out.String(), "acquire on 127.0.0.1:1")
}

// The demo's verdict tells a lock that did not hold (two holders, a fence
// going back, a lost update) from calls that failed while it held.
func TestDemoReportVerdict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    results
		code int
		says string
	}{
		{"held", results{acquisitions: 3, maxHolders: 1, lastFence: 3, counter: 3}, 0, "OK: one holder at a time"},
		{"call failed", results{acquisitions: 3, maxHolders: 1, lastFence: 3, counter: 3, errs: []error{errors.New("i/o timeout")}}, 1, "FAILED: the lock held (one holder at a time"},
		{"two holders", results{acquisitions: 3, maxHolders: 2, lastFence: 3, counter: 3}, 1, "FAILED: the lock did not hold"},
		{"lost update", results{acquisitions: 3, maxHolders: 1, lastFence: 3, counter: 2}, 1, "FAILED: the lock did not hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			assert.Equal(t, tc.code, tc.r.report(&out))
			assert.Contains(t, out.String(), tc.says)
		})
	}
}
