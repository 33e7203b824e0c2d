package main

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/internal/redistest"
)

// --driver picks the client: each one takes the lock in turn (the fence
// moves on once per driver), and an unknown name is a usage error.
func TestDriverFlag(t *testing.T) {
	t.Parallel()
	url := "single://" + redistest.Start(t).Addr
	for i, d := range []string{"goredis", "redigo", "rueidis", "valkeygo"} {
		code, out := runDLM(t, "run", "--driver", d, "--url", url, "--key", "job", "--", "sh", "-c", `echo "fence=$DLM_FENCE"`)
		assert.Equal(t, 0, code, out)
		assert.Contains(t, out, "fence="+strconv.Itoa(i+1), d)
	}
	code, out := runDLM(t, "run", "--driver", "nope", "--url", url, "--key", "job", "--", "true")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, `--driver "nope"`)
	code, out = runDLM(t, "inspect", "--driver", "valkeygo", "--url", url, "job")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "goredis only")
}

func TestDemoDriver(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"demo", "--driver", "valkeygo", "--addr", srv.Addr, "--duration", "500ms"}, &out, &errOut)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "OK:")
	assert.Equal(t, 2, run(context.Background(), []string{"demo", "--driver", "nope"}, &out, &errOut))
}
