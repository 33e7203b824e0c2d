package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// doctor names a server whose wall clock is off this machine's by more
// than a tenth of the TTL, and is quiet about one in step.
func TestDoctorClock(t *testing.T) {
	t.Parallel()
	s, clock := redistest.StartClocked(t, "--appendonly", "yes", "--appendfsync", "always")
	require.NoError(t, s.Client(t).ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err())
	url := "single://" + s.Addr

	code, out := runDLM(t, "doctor", "--url", url, "--ttl", "30s")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok   clock within", out)

	clock.Jump(-5 * time.Second)
	code, out = runDLM(t, "doctor", "--url", url, "--ttl", "30s")
	assert.Equal(t, 1, code, out)
	assert.Regexp(t, `warn clock [0-9.]+s behind this machine's \(more than a tenth of the 30s TTL\)`, out)

	code, out = runDLM(t, "doctor", "--url", url, "--ttl", "2m")
	assert.Equal(t, 0, code, "5s is within a tenth of a two-minute TTL:\n%s", out)
}
