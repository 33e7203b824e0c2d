package nodekit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/internal/runner"
)

// Helpers for a driver over a client that pipelines typed commands and
// subscribes with a blocking Receive (rueidis, valkey-go): the driver says
// how to build, send and read its commands (a Pipe) and how to receive a
// channel (a Receiver); RunPipe, RunWaitPipe and NewReceiverHub do the rest
// of driver.Node's Run, RunWait and Watch.

// A Pipe builds, sends and reads a client's commands C and results R.
type Pipe[C any, R any] interface {
	// Script builds call's EVAL (when call.Source is set) or EVALSHA. A
	// panic (the builder's, on keys in different slots) fails the call
	// alone with dlm.ErrInvalid.
	Script(call *driver.Call) C
	// Blocking builds args as a command that blocks its connection.
	Blocking(args ...string) C
	// Do sends one command and returns its result.
	Do(ctx context.Context, cmd C) R
	// DoMulti sends cmds in one batch and returns their results. When
	// dedicated, the batch has a connection of its own (on a Cluster, to
	// the slot's primary), closed unless every reply arrived.
	DoMulti(ctx context.Context, cmds []C, dedicated bool) []R
	// Ints converts a script's result, Value a wait's (to the values
	// ParseAcks takes); both return error replies as *driver.ReplyError.
	Ints(r R) ([]int64, error)
	Value(r R) (any, error)
	// Cluster reports whether the client routes commands by hash slot,
	// Slot a command's slot (16384 and above: no key).
	Cluster() bool
	Slot(cmd C) uint16
}

// RunPipe implements driver.Node.Run over p: one Do for one call (awaited
// under ctx when ctx can end), otherwise one DoMulti awaited under ctx
// (Await) — on a Cluster, one per hash slot side by side, so that a master
// stalling past ctx does not take the others' replies.
func RunPipe[C any, R any](ctx context.Context, p Pipe[C, R], calls []driver.Call) {
	runPipe(ctx, p, calls, nil)
}

// runPipe is RunPipe, with the state st keeps between calls, unless st is
// nil.
func runPipe[C any, R any](ctx context.Context, p Pipe[C, R], calls []driver.Call, st *pipeState) {
	if len(calls) == 1 {
		if cmd, ok := script(p, &calls[0]); ok {
			calls[0].Reply, calls[0].Err = doOne(ctx, p, cmd, st)
		}
		return
	}
	if len(calls) > 1 && ctx.Done() != nil && p.Cluster() {
		groups, ok := map[uint16][]int{}, true
		for i := 0; ok && i < len(calls); i++ {
			var cmd C
			if cmd, ok = script(p, &calls[i]); ok {
				groups[p.Slot(cmd)] = append(groups[p.Slot(cmd)], i)
			}
		}
		if ok && len(groups) > 1 {
			RunGroups(calls, slices.Collect(maps.Values(groups)), func(part []driver.Call) { _, _ = execPipe(ctx, p, part, nil, st) })
			return
		}
	}
	_, _ = execPipe(ctx, p, calls, nil, st)
}

// A pipeState is what a PipeNode keeps between calls: the state of calls
// awaited in a goroutine, for reuse, the goroutines that await them (kept
// between calls: a new one grows its stack through the client's code on
// every call), and whether the last call ended without the server's
// answer.
//
// A call whose context has a deadline goes straight to the client, on the
// caller's goroutine, while the node's calls are answered: rueidis and
// valkey-go put the deadline on the socket and on the dial, and save the
// goroutine and its two wake-ups (about 50µs per serial lock and unlock on
// a 2-core machine; bench's serial scenario). A call that ended without an
// answer (a timeout, a broken connection) makes the calls after it wait in
// a goroutine until one is answered: the client then reopens its
// connection, and a caller that comes while another's dial is under way
// waits for that dial, under the other caller's deadline, not its own. A
// connection the client closed in the background (a failed keep-alive
// ping) is not seen here: the first calls after it go straight to the
// client, and the client bounds a dial by its own dial timeout.
type pipeState struct {
	ones   sync.Pool              // of *awaitOne[C, R]: one call's state in flight, reused
	runs   *runner.Pool[runnable] // the goroutines that await calls, kept between calls
	unsure atomic.Bool            // the last call ended without the server's answer
}

// A runnable is a call awaited on one of a pipeState's goroutines.
type runnable interface{ run() }

// direct reports whether a call under ctx may go straight to the client:
// ctx cannot end, or it has a deadline and the node's calls are answered.
func (st *pipeState) direct(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	if st == nil || st.unsure.Load() {
		return false
	}
	_, ok := ctx.Deadline()
	return ok
}

// observe records whether a call was answered: err is nil or a reply of
// the server's (see answered).
func (st *pipeState) observe(err error) {
	if st == nil {
		return
	}
	if unsure := !answered(err); st.unsure.Load() != unsure {
		st.unsure.Store(unsure) // written only on a change: every call reads it
	}
}

// answered reports whether err, a call's, is nil or a reply of the
// server's.
func answered(err error) bool {
	if err == nil {
		return true
	}
	var re *driver.ReplyError // allocated: only on this path
	return errors.As(err, &re)
}

// RunWaitPipe implements driver.Node.RunWait over p: the calls and w's
// command, blocking, in one dedicated DoMulti; on a Cluster the calls must
// share a hash slot, else they fail with dlm.ErrInvalid.
func RunWaitPipe[C any, R any](ctx context.Context, p Pipe[C, R], calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	wcmd, err := WaitCommand(w)
	if err != nil {
		Fail(calls, err)
		return driver.Acks{}, err
	}
	resps, err := execPipe(ctx, p, calls, wcmd, nil)
	if err != nil {
		return driver.Acks{}, err
	}
	v, err := p.Value(resps[len(resps)-1])
	acks, perr := ParseAcks(w, v)
	if err = cmp.Or(err, perr); err != nil {
		return driver.Acks{}, fmt.Errorf("dlm: %s after the scripts: %w", wcmd[0], err)
	}
	return acks, nil
}

// doOne sends cmd with Do and returns its script's reply. Unless it may
// go straight to the client (pipeState.direct), Do runs in a goroutine of
// its own (see Await) and doOne returns ctx's error as soon as ctx ends.
func doOne[C any, R any](ctx context.Context, p Pipe[C, R], cmd C, st *pipeState) ([]int64, error) {
	if st.direct(ctx) {
		reply, err := p.Ints(p.Do(ctx, cmd))
		err = own(ctx, err)
		st.observe(err)
		return reply, err
	}
	var o *awaitOne[C, R]
	if st != nil {
		o, _ = st.ones.Get().(*awaitOne[C, R])
	}
	if o == nil {
		o = &awaitOne[C, R]{end: make(chan struct{}, 1)}
	}
	o.ctx, o.p, o.cmd = ctx, p, cmd
	if st != nil && st.runs != nil {
		st.runs.Go(o)
	} else {
		go o.run()
	}
	select {
	case <-o.end:
	case <-ctx.Done():
		st.observe(ctx.Err())
		return nil, ctx.Err() // o is the goroutine's now
	}
	reply, err := p.Ints(o.r)
	err = own(ctx, err)
	st.observe(err)
	if st != nil {
		*o = awaitOne[C, R]{end: o.end}
		st.ones.Put(o)
	}
	return reply, err
}

// An awaitOne is doOne's command in flight. Its goroutine signals end
// last and then no longer touches it, so one whose end was received is
// reused.
type awaitOne[C any, R any] struct {
	ctx context.Context
	p   Pipe[C, R]
	cmd C
	r   R
	end chan struct{} // buffered: the goroutine never waits on it
}

func (o *awaitOne[C, R]) run() {
	o.r = o.p.Do(o.ctx, o.cmd)
	o.end <- struct{}{}
}

// execPipe runs calls in one DoMulti, with the command wait, if any, last,
// and returns the results or the error of the first failed call.
// With st, a batch without a wait may go straight to the client
// (pipeState.direct).
func execPipe[C any, R any](ctx context.Context, p Pipe[C, R], calls []driver.Call, wait []string, st *pipeState) ([]R, error) {
	cmds, idx := make([]C, 0, len(calls)+1), make([]int, 0, len(calls))
	for i := range calls {
		if cmd, ok := script(p, &calls[i]); ok {
			cmds, idx = append(cmds, cmd), append(idx, i)
		}
	}
	if wait != nil && p.Cluster() && spansSlots(p, cmds) {
		Fail(calls, fmt.Errorf("%w: the calls of RunWait span hash slots", driver.ErrInvalid))
		return nil, FirstErr(calls)
	}
	if wait != nil {
		cmds = append(cmds, p.Blocking(wait...))
	}
	if wait == nil && ctx.Done() != nil && len(cmds) > pipeChunk {
		resps, done := chunked(ctx, p, cmds)
		for j, i := range idx {
			if j < done {
				calls[i].Reply, calls[i].Err = p.Ints(resps[j])
				calls[i].Err = own(ctx, calls[i].Err)
			} else {
				calls[i].Err = cmp.Or(ctx.Err(), context.Canceled)
			}
		}
		return resps, FirstErr(calls)
	}
	var resps []R
	var err error
	if wait == nil && st.direct(ctx) {
		resps = p.DoMulti(ctx, cmds, false)
	} else if resps, err = Await(ctx, func() []R { return p.DoMulti(ctx, cmds, wait != nil) }); err != nil {
		Fail(calls, err)
		st.observe(err)
		return nil, err
	}
	var lost error // of a call the server did not answer
	for j, i := range idx {
		calls[i].Reply, calls[i].Err = p.Ints(resps[j])
		calls[i].Err = own(ctx, calls[i].Err)
		if lost == nil && !answered(calls[i].Err) {
			lost = calls[i].Err
		}
	}
	st.observe(lost)
	return resps, FirstErr(calls)
}

// pipeChunk is how many commands of a large batch one DoMulti sends when
// the context can end (see chunked).
const pipeChunk = 128

// chunked sends cmds as DoMultis of pipeChunk commands, one after the
// other, from a goroutine of its own, and returns as soon as ctx ends: the
// results, of which the first done are set. A client such as rueidis gives
// a DoMulti cut by its context that error on every command, those whose
// replies it had read included; parts keep the replies of those that
// finished.
func chunked[C any, R any](ctx context.Context, p Pipe[C, R], cmds []C) (resps []R, done int) {
	var (
		mu        sync.Mutex
		own       = make([]R, len(cmds))
		abandoned bool
	)
	end := make(chan struct{})
	go func() {
		defer close(end)
		for lo := 0; lo < len(cmds) && ctx.Err() == nil; lo += pipeChunk {
			hi := min(lo+pipeChunk, len(cmds))
			r := p.DoMulti(ctx, cmds[lo:hi], false)
			mu.Lock()
			stop := abandoned
			if !stop {
				copy(own[lo:hi], r)
				done = hi
			}
			mu.Unlock()
			if stop {
				return
			}
		}
	}()
	select {
	case <-end:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	abandoned = true
	return own, done
}

// script resets c's reply and builds its command, or sets c.Err.
func script[C any, R any](p Pipe[C, R], c *driver.Call) (cmd C, ok bool) {
	c.Reply, c.Err = nil, nil
	defer func() {
		if v := recover(); v != nil {
			c.Err, ok = fmt.Errorf("%w: %v", driver.ErrInvalid, v), false
		}
	}()
	return p.Script(c), true
}

// spansSlots reports whether the keys of cmds lie in more than one slot.
func spansSlots[C, R any](p Pipe[C, R], cmds []C) bool {
	keyed := slices.DeleteFunc(slices.Clone(cmds), func(c C) bool { return p.Slot(c) >= 16384 })
	return slices.ContainsFunc(keyed, func(c C) bool { return p.Slot(c) != p.Slot(keyed[0]) })
}

// Await returns f's result, or ctx's error as soon as ctx ends. When ctx
// can end, f runs in a goroutine of its own, whose result is dropped once
// abandoned: f must write nothing of the caller's.
func Await[T any](ctx context.Context, f func() T) (T, error) {
	if ctx.Done() == nil {
		return f(), nil
	}
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// own returns err, a call's error under ctx, unless it is a context's
// error and ctx has not ended: rueidis and valkey-go close a connection
// when a call sent on it alone (their sync mode, which puts the call's
// deadline on the socket) outlives its deadline, and fail the calls queued
// behind it with that call's error. Such a call was not answered, and its
// caller's time has not run out: it gets an error that says so instead,
// and does not match context.DeadlineExceeded.
func own(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return err // its own deadline, which the socket saw before ctx's timer fired
	}
	return &droppedError{err}
}

// A droppedError is the error of a call whose connection the client closed
// when another call's context ended (see own).
type droppedError struct{ theirs error }

func (e *droppedError) Error() string {
	return "the client closed the connection under the call when another call on it ended (" + e.theirs.Error() + ")"
}

// FirstErr returns the error of the first failed call, or nil.
func FirstErr(calls []driver.Call) error {
	if i := slices.IndexFunc(calls, func(c driver.Call) bool { return c.Err != nil }); i >= 0 {
		return calls[i].Err
	}
	return nil
}

// IntsOf converts a script's array reply, a client's messages read with
// toInt, to []int64 (a Pipe's Ints converts an integer n to []int64{n}); err, the client's error reading the array, and
// toInt's are returned as they are.
func IntsOf[M any](arr []M, err error, toInt func(*M) (int64, error)) ([]int64, error) {
	out := make([]int64, len(arr))
	for i := 0; err == nil && i < len(arr); i++ {
		out[i], err = toInt(&arr[i])
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// HandshakeReply returns err as a *driver.ReplyError when it wraps noCache:
// rueidis and valkey-go report any error reply to their handshake's CLIENT
// TRACKING (BUSY, LOADING, NOPERM) as their ErrNoCache, after the reply's
// text and the command ("BUSY Redis is busy...: [CLIENT TRACKING ON
// OPTIN]\n..."). It returns err otherwise.
func HandshakeReply(err, noCache error) error {
	if errors.Is(err, noCache) {
		if text, _, ok := strings.Cut(err.Error(), ": [CLIENT"); ok {
			return Reply(text, err)
		}
	}
	return err
}

// UnknownMaster returns err, a Sentinel client's error on creation, as an
// error matching driver.ErrUnknownMaster when it wraps a Sentinel's reply that
// it does not know master ("ERR No such master"); err otherwise.
func UnknownMaster(err error, master string, sentinels []string) error {
	var re *driver.ReplyError
	if master != "" && errors.As(err, &re) && re.Code == "ERR" && strings.HasPrefix(re.Message, "No such master") {
		return fmt.Errorf("%w %q (Sentinels %s): %w", driver.ErrUnknownMaster, master, strings.Join(sentinels, ","), re)
	}
	return err
}
