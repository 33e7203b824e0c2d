package nodekit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

// TestPipeNodeRunMany: runMany with auto-pipelining and with a pool of
// connections, each on a server of its own; on a Cluster it runs in
// TestPipeNodeCluster.
func TestPipeNodeRunMany(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		for _, tc := range []struct {
			name string
			opt  pipeOptions
		}{
			{"autopipelining", pipeOptions{}},
			{"pool", pipeOptions{noAutoPipelining: true}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.opt.addrs = []string{redistest.Start(t).Addr}
				runMany(t, d.node(t, tc.opt), false)
			})
		}
	})
}

// runMany checks Run and Script.RunMany on n, a node of an empty server
// (a Cluster's when cluster is true) whose script cache is empty: NOSCRIPT
// is wrapped, RunMany loads the script and runs every call once and in
// order, a failing call does not fail the others, and only integers and
// arrays of integers are replies.
func runMany(t *testing.T, n driver.Node, cluster bool) {
	ctx := context.Background()
	s := eval.NewScript("return {tonumber(ARGV[1]), redis.call('INCR', KEYS[1])}")
	calls := make([]driver.Call, 50)
	for i := range calls {
		calls[i] = driver.Call{Keys: []string{"k" + strconv.Itoa(i%7)}, Args: []string{strconv.Itoa(i)}}
	}
	// Not cached yet: every call meets NOSCRIPT, wrapped.
	first := []driver.Call{{SHA1: s.SHA1(), Keys: []string{"a"}}, {SHA1: s.SHA1(), Keys: []string{"b"}}, {SHA1: s.SHA1(), Keys: []string{"c"}}}
	n.Run(ctx, first)
	for i, c := range first {
		assert.ErrorIs(t, c.Err, driver.ErrNoScript, "call %d", i)
		assert.Nil(t, c.Reply, "call %d", i)
	}
	// RunMany loads it and runs the rest again.
	s.RunMany(ctx, n, calls)
	perKey := map[string]int64{}
	for i, c := range calls {
		require.NoError(t, c.Err, "call %d", i)
		perKey[c.Keys[0]]++
		assert.Equal(t, []int64{int64(i), perKey[c.Keys[0]]}, c.Reply, "call %d ran once, in order", i)
	}
	// A failing call does not fail the others; neither does one
	// whose keys span slots (an error on a Cluster, fine elsewhere).
	bad := eval.NewScript("if ARGV[1] == 'x' then return redis.error_reply('boom') end return {1}")
	res := []driver.Call{
		{Keys: []string{"a"}, Args: []string{"1"}},
		{Keys: []string{"a"}, Args: []string{"x"}},
		{Keys: []string{"a", "b"}, Args: []string{"2"}},
		{Keys: []string{"a"}, Args: []string{"3"}},
	}
	bad.RunMany(ctx, n, res)
	assert.Equal(t, []int64{1}, res[0].Reply)
	assert.ErrorContains(t, res[1].Err, "boom")
	if cluster {
		assert.ErrorIs(t, res[2].Err, driver.ErrInvalid)
	} else {
		assert.NoError(t, res[2].Err)
	}
	assert.Equal(t, []int64{1}, res[3].Reply)
	// Replies other than integers and arrays of integers are
	// refused; an integer n is []int64{n}, alone or in a batch.
	r, err := runSource(ctx, n, "return 7", "a")
	assert.NoError(t, err)
	assert.Equal(t, []int64{7}, r, "an integer")
	ints := []driver.Call{{Source: "return -7", Keys: []string{"a"}}, {Source: "return {2}", Keys: []string{"a"}}}
	n.Run(ctx, ints)
	assert.Equal(t, []int64{-7}, ints[0].Reply, "an integer, in a batch")
	assert.Equal(t, []int64{2}, ints[1].Reply)
	for _, src := range []string{"return 'str'", "return {1, 'a'}", "return nil"} {
		_, err := runSource(ctx, n, src, "a")
		assert.Error(t, err, src)
		c := []driver.Call{{Source: src, Keys: []string{"a"}}, {Source: "return {2}", Keys: []string{"a"}}}
		n.Run(ctx, c)
		assert.Error(t, c[0].Err, "%s, in a batch", src)
		assert.Equal(t, []int64{2}, c[1].Reply, "the other call of the batch")
	}
	// A Call's old reply does not survive a new Run.
	c := []driver.Call{{Source: "return 'str'", Keys: []string{"a"}, Reply: []int64{9}}}
	n.Run(ctx, c)
	assert.Nil(t, c[0].Reply)
	assert.Error(t, c[0].Err)
}

// A frozen server never answers: Run returns when ctx ends, with ctx's
// error on every call, for one call and for several, and the goroutine
// that waits for a context without deadline, abandoned, never writes into
// the caller's calls (the race detector would see it once the server
// answers). The bound is atOnce, against a client timeout of slowClient.
// After each thaw the test sleeps 100ms of real time: the subject is what
// the abandoned goroutine does once the server answers, and the sleep is
// the time it gets to do it (to write, wrongly, into the calls the caller
// now reuses, where -race would see it).
func TestPipeNodeRunContext(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		for _, tc := range []struct {
			name     string
			opt      pipeOptions
			deadline bool
		}{
			{"autopipelining/deadline", pipeOptions{}, true},
			{"autopipelining/cancel", pipeOptions{}, false},
			{"pool/deadline", pipeOptions{noAutoPipelining: true}, true},
			{"pool/cancel", pipeOptions{noAutoPipelining: true}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv := redistest.Start(t)
				tc.opt.addrs = []string{srv.Addr}
				tc.opt.connWriteTimeout = slowClient
				n := d.node(t, tc.opt)
				_, err := runSource(context.Background(), n, "return {1}")
				require.NoError(t, err)
				for _, calls := range [][]driver.Call{
					{{Source: "return {1}", Keys: []string{"a"}}},
					{{Source: "return {1}", Keys: []string{"a"}}, {Source: "return {2}", Keys: []string{"b"}}},
				} {
					srv.Freeze(t)
					var ctx context.Context
					var cancel context.CancelFunc
					if tc.deadline {
						ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
					} else {
						ctx, cancel = context.WithCancel(context.Background())
						time.AfterFunc(100*time.Millisecond, cancel)
					}
					start := time.Now()
					n.Run(ctx, calls)
					took := time.Since(start)
					cancel()
					want := context.Canceled
					if tc.deadline {
						want = context.DeadlineExceeded
					}
					for i, c := range calls {
						assert.Nil(t, c.Reply, "%d calls: call %d", len(calls), i)
						assert.ErrorIs(t, c.Err, want, "%d calls: call %d", len(calls), i)
					}
					assert.Less(t, took, atOnce)
					srv.Thaw(t)
					// The server answers the abandoned commands now; the caller
					// owns its calls.
					time.Sleep(100 * time.Millisecond)
					for i := range calls {
						calls[i].Reply, calls[i].Err = []int64{0}, nil
					}
				}
			})
		}
	})
}
