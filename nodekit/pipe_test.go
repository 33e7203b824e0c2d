package nodekit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/nodekit"
)

// fakePipe is a Pipe whose commands are calls' first keys, routed by the
// key's slot when cluster; a key "stall" is never answered (its batch
// waits for the context) and a key "panic" makes Script panic. answered,
// when set, is sent to after each batch without "stall".
type fakePipe struct {
	cluster  bool
	answered chan struct{}
}

type fakeCmd struct{ key string }

func (p fakePipe) Script(c *driver.Call) fakeCmd {
	if c.Keys[0] == "panic" {
		panic("keys in different slots")
	}
	return fakeCmd{c.Keys[0]}
}
func (p fakePipe) Blocking(args ...string) fakeCmd { return fakeCmd{} }
func (p fakePipe) Do(ctx context.Context, cmd fakeCmd) string {
	if cmd.key == "stall" {
		<-ctx.Done()
		return canceled
	}
	return cmd.key
}
func (p fakePipe) DoMulti(ctx context.Context, cmds []fakeCmd, _ bool) []string {
	out, stalled := make([]string, len(cmds)), false
	for i, c := range cmds {
		out[i] = c.key
		if c.key == "stall" {
			stalled = true
			<-ctx.Done()
			out[i] = canceled // as a client's result cut by its context
		}
	}
	if !stalled && p.answered != nil {
		p.answered <- struct{}{}
	}
	return out
}

// canceled is the result of a command cut by its context.
const canceled = "!canceled"

func (p fakePipe) Ints(r string) ([]int64, error) {
	switch r {
	case canceled:
		return nil, context.Canceled
	case "lost": // the connection broke
		return nil, errors.New("read: connection reset by peer")
	case "error-reply":
		return nil, &driver.ReplyError{Code: "ERR", Message: "boom"}
	}
	return []int64{int64(len(r))}, nil
}
func (p fakePipe) Value(r string) (any, error) { return int64(1), nil }
func (p fakePipe) Cluster() bool               { return p.cluster }
func (p fakePipe) Slot(c fakeCmd) uint16 {
	if c.key == "" {
		return 16384
	}
	return uint16(eval.Slot(c.key))
}

func calls(keys ...string) []driver.Call {
	out := make([]driver.Call, len(keys))
	for i, k := range keys {
		out[i] = driver.Call{SHA1: "x", Keys: []string{k}}
	}
	return out
}

// TestPipeNodeRunOne: one call under a context that can end returns its
// reply, or the context's error as soon as the context ends while the
// client stalls; the state a call's goroutine used is reused only after
// the goroutine finished (an abandoned call's late result reaches no other
// call: run with -race).
func TestPipeNodeRunOne(t *testing.T) {
	n := nodekit.NewPipeNode("fake", fakePipe{}, nodekit.Receiver{})
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		key := strings.Repeat("x", i%7+1)
		c := calls(key)
		n.Run(ctx, c)
		require.NoError(t, c[0].Err)
		assert.Equal(t, []int64{int64(len(key))}, c[0].Reply)

		c = calls("stall")
		done := make(chan struct{})
		go func() { n.Run(ctx, c); close(done) }()
		cancel()
		<-done
		assert.ErrorIs(t, c[0].Err, context.Canceled)
		assert.Nil(t, c[0].Reply)
	}
}

// goroutinePipe is a fakePipe that reports the goroutine each Do and
// DoMulti ran on.
type goroutinePipe struct {
	fakePipe
	ran chan uint64
}

func (p goroutinePipe) Do(ctx context.Context, cmd fakeCmd) string {
	p.ran <- goroutineID()
	return p.fakePipe.Do(ctx, cmd)
}

func (p goroutinePipe) DoMulti(ctx context.Context, cmds []fakeCmd, dedicated bool) []string {
	p.ran <- goroutineID()
	return p.fakePipe.DoMulti(ctx, cmds, dedicated)
}

// goroutineID returns the calling goroutine's number, from its stack's
// first line ("goroutine 7 [running]:").
func goroutineID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, err := strconv.ParseUint(strings.Fields(string(buf))[1], 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// A call under a context with a deadline goes straight to the client, on
// the caller's goroutine, while the node's calls are answered (error
// replies included); after a call the server did not answer, calls wait in
// a goroutine of their own until one is answered. A context that can end
// without a deadline always has the goroutine; one that cannot end never.
func TestPipeNodeGoesStraightToAnsweringClient(t *testing.T) {
	p := goroutinePipe{ran: make(chan uint64, 1)}
	n := nodekit.NewPipeNode("fake", p, nodekit.Receiver{})
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	cancelable, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	self := goroutineID()
	for _, step := range []struct {
		ctx      context.Context
		keys     []string
		straight bool
	}{
		{deadline, []string{"a"}, true},
		{deadline, []string{"a", "b"}, true},
		{cancelable, []string{"a"}, false},
		{cancelable, []string{"a", "b"}, false},
		{context.Background(), []string{"a"}, true},
		{deadline, []string{"error-reply"}, true},
		{deadline, []string{"a"}, true}, // an error reply is an answer
		{deadline, []string{"lost"}, true},
		{deadline, []string{"a"}, false}, // after a call that got no answer
		{deadline, []string{"a", "b"}, true},
		{deadline, []string{"a", "lost"}, true},
		{deadline, []string{"a", "b"}, false},
		{deadline, []string{"a"}, true},
	} {
		c := calls(step.keys...)
		n.Run(step.ctx, c)
		assert.Equal(t, step.straight, <-p.ran == self, "%v: on the caller's goroutine", step.keys)
	}
}

func TestRunPipe(t *testing.T) {
	// A builder's panic fails its call alone.
	c := calls("a", "panic", "bcd")
	nodekit.RunPipe(context.Background(), fakePipe{}, c)
	assert.Equal(t, []int64{1}, c[0].Reply)
	assert.ErrorIs(t, c[1].Err, driver.ErrInvalid)
	assert.Equal(t, []int64{3}, c[2].Reply)

	// On a Cluster, a slot that stalls past the context fails alone: the
	// other slot's batch keeps its replies (unless the cancel overtakes
	// them, which it may: the batch's wait sees both at once).
	kept := 0
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		c = calls("stall", "{b}1", "{b}22")
		p, done := fakePipe{cluster: true, answered: make(chan struct{}, 1)}, make(chan struct{})
		go func() { nodekit.RunPipe(ctx, p, c); close(done) }()
		select {
		case <-p.answered:
		case <-time.After(10 * time.Second): // only when the slots share a batch
			cancel()
			t.Fatal("the other slot's batch waited for the stalled one")
		}
		cancel()
		<-done
		assert.ErrorIs(t, c[0].Err, context.Canceled)
		if c[1].Err == nil {
			kept++
			assert.Equal(t, []int64{4}, c[1].Reply)
			assert.Equal(t, []int64{5}, c[2].Reply)
		}
	}
	assert.NotZero(t, kept, "the other slot's replies were never kept")

	// RunWait: calls of one slot run, then the wait; spanning slots on a
	// Cluster is refused unsent.
	c = calls("{k}a", "{k}bb")
	acks, err := nodekit.RunWaitPipe(context.Background(), fakePipe{cluster: true}, c, driver.Wait{Replicas: 1, Timeout: 1e6})
	require.NoError(t, err)
	assert.Equal(t, driver.Acks{Replicas: 1}, acks)
	assert.Equal(t, []int64{5}, c[1].Reply)
	c = calls("a", "b")
	_, err = nodekit.RunWaitPipe(context.Background(), fakePipe{cluster: true}, c, driver.Wait{Replicas: 1, Timeout: 1e6})
	assert.ErrorIs(t, err, driver.ErrInvalid)
	assert.ErrorIs(t, c[1].Err, driver.ErrInvalid)
}

func TestAwait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	block := make(chan struct{})
	defer close(block)
	_, err := nodekit.Await(ctx, func() int { <-block; return 1 })
	assert.ErrorIs(t, err, context.Canceled, "returns when the context ends, not when f does")
	v, err := nodekit.Await(context.Background(), func() int { return 2 })
	assert.Equal(t, 2, v)
	assert.NoError(t, err)
}

func TestUnknownMasterAndHandshake(t *testing.T) {
	noCache := errors.New("no cache")
	err := nodekit.HandshakeReply(fmt.Errorf("NOPERM no access: [CLIENT TRACKING ON OPTIN]\n%w", noCache), noCache)
	var re *driver.ReplyError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "NOPERM", re.Code)
	plain := errors.New("dial tcp: refused")
	assert.Equal(t, plain, nodekit.HandshakeReply(plain, noCache))

	err = nodekit.UnknownMaster(nodekit.Reply("No such master with that name", nil), "m", []string{"s:1"})
	assert.ErrorIs(t, err, driver.ErrUnknownMaster)
	assert.ErrorContains(t, err, `"m"`)
	other := nodekit.Reply("NOAUTH Authentication required.", nil)
	assert.Equal(t, error(other), nodekit.UnknownMaster(other, "m", nil))
}
