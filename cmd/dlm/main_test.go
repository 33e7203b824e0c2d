package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/internal/redistest"
)

func TestDemoEmbedded(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--duration", "300ms", "--workers", "4"}, &out, &errOut)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "most holders at once    1 (must be 1)")
	assert.Contains(t, out.String(), "strictly increasing: yes")
	assert.Contains(t, out.String(), "OK:")
}

func TestDemoRealServer(t *testing.T) {
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--addr", srv.Addr, "--duration", "300ms"}, &out, &errOut)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "Redis at "+srv.Addr)
	assert.Contains(t, out.String(), "OK:")
}

func TestUsageErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), nil, &out, &errOut))
	assert.Equal(t, 2, run(context.Background(), []string{"nope"}, &out, &errOut))
	assert.Contains(t, errOut.String(), `unknown command "nope"`)
	assert.Equal(t, 2, run(context.Background(), []string{"demo", "--workers", "0"}, &out, &errOut))
	assert.Equal(t, 2, run(context.Background(), []string{"demo", "--ttl", "0s"}, &out, &errOut))
}

// A server nobody listens on: the demo reports errors and fails.
func TestDemoUnreachable(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--addr", "127.0.0.1:1", "--duration", "200ms"}, &out, &errOut)
	assert.Equal(t, 1, code, out.String())
	assert.Contains(t, out.String(), "FAILED")
	assert.Contains(t, out.String(), "acquire on Redis<127.0.0.1:1")
}
