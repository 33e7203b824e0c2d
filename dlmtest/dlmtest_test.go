package dlmtest_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// eval runs src on n with EVAL under a context of d (a minute when 0).
func eval(n driver.Node, d time.Duration, src string, keys []string, args ...string) ([]int64, error) {
	if d == 0 {
		d = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	calls := []driver.Call{{Source: src, Keys: keys, Args: args}}
	n.Run(ctx, calls)
	return calls[0].Reply, calls[0].Err
}

func mustEval(t *testing.T, n driver.Node, src string, keys []string, args ...string) []int64 {
	t.Helper()
	r, err := eval(n, 0, src, keys, args...)
	if err != nil {
		t.Fatalf("eval %q: %v", src, err)
	}
	return r
}

func get(t *testing.T, srv *dlmtest.Server, key string) any {
	t.Helper()
	v, err := srv.Do("GET", key)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

const setPX = "return {redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0}"

// TestReplies: script replies convert as Redis converts them, and error
// replies are *dlm.ReplyErrors with Redis' codes.
func TestReplies(t *testing.T) {
	srv := dlmtest.NewServer()
	defer srv.Close()
	n := srv.Node()
	k := []string{"k"}
	// In order: EXISTS counts the key the INCRBY before it made.
	for _, tc := range []struct {
		src  string
		want []int64
	}{
		{"return {1.9, -1.9, 2^53}", []int64{1, -1, 1 << 53}},
		{"return {1, 2, nil, 4}", []int64{1, 2}}, // up to the first nil
		{"return {redis.call('INCRBY', KEYS[1], -3)}", []int64{-3}},
		{"return {redis.call('EXISTS', KEYS[1], 'missing', KEYS[1])}", []int64{2}},
		{"local t = redis.call('TIME') return {#t, tonumber(t[2]) < 1000000 and 1 or 0}", []int64{2, 1}},
		{"local ok, e = pcall(redis.call, 'NOPE') return {ok and 1 or 0, type(e) == 'table' and 1 or 0}", []int64{0, 1}},
		{"return {type(redis.pcall('NOPE')) == 'table' and 1 or 0}", []int64{1}},
		{"redis.call('SET', 'big', 1700000000123456) return {tonumber(redis.call('GET', 'big'))}", []int64{1700000000123456}},
		// string.format('%d', n) has a fast path; other formats go to gopher-lua's.
		{"return {tonumber(string.format('%d', 1.9)), tonumber(string.format('%d', -7)), tonumber(string.format('%d', 2^53))}", []int64{1, -7, 1 << 53}},
		{"return {string.format('%03d', 7) == '007' and 1 or 0, string.format('%d:%d', 1, 2) == '1:2' and 1 or 0}", []int64{1, 1}},
	} {
		if got := mustEval(t, n, tc.src, k); !slices.Equal(got, tc.want) {
			t.Errorf("%s: reply %v, want %v", tc.src, got, tc.want)
		}
	}
	for src, code := range map[string]string{
		"return redis.call('RPUSH', KEYS[1], 'x')":   "WRONGTYPE", // k holds a string
		"return redis.call('NOPE')":                  "ERR",
		"return redis.error_reply('MYCODE message')": "MYCODE",
		"return {redis.call('INCR', 'list')}":        "WRONGTYPE",
		"x = 1":                                      "ERR", // globals are read-only
		"return {1} +":                               "ERR", // does not compile
	} {
		_, _ = srv.Do("RPUSH", "list", "a")
		_, err := eval(n, 0, src, k)
		var re *driver.ReplyError
		if !errors.As(err, &re) || re.Code != code || errors.Is(err, driver.ErrNoScript) {
			t.Errorf("%s: error %v, want a *driver.ReplyError with code %s", src, err, code)
		}
	}
	_, err := eval(n, 0, "return redis.call('GET', 'list')", k)
	if !dlm.Permanent(err) {
		t.Errorf("WRONGTYPE from a script: %v, want dlm.Permanent", err)
	}
	_, err = eval(n, 0, "return redis.call('NOPE')", k)
	if !strings.Contains(err.Error(), "unknown command") || !dlm.Permanent(err) {
		t.Errorf("a command dlmtest lacks: %v, want a permanent \"unknown command\" error", err)
	}
	for _, src := range []string{"return 'x'", "return redis.status_reply('OK')", "return {1, {2}}", "return {1, 'x'}"} {
		if r, err := eval(n, 0, src, k); err == nil {
			t.Errorf("%s: reply %v, want an error (not an integer or an array of integers)", src, r)
		}
	}
	if r, err := eval(n, 0, "return -7", k); err != nil || !slices.Equal(r, []int64{-7}) {
		t.Errorf("return -7: reply %v, %v, want [-7] (an integer n is []int64{n})", r, err)
	}
	calls := []driver.Call{{SHA1: strings.Repeat("ab", 20), Keys: k}}
	n.Run(context.Background(), calls)
	if !errors.Is(calls[0].Err, driver.ErrNoScript) {
		t.Errorf("EVALSHA of an unknown digest: %v, want driver.ErrNoScript", calls[0].Err)
	}
}

// TestCommands: options and errors of the commands, as Redis has them.
func TestCommands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		do := func(args ...string) any {
			v, err := srv.Do(args...)
			if err != nil {
				return err.Error()
			}
			return v
		}
		for _, c := range []struct {
			args []string
			want any
		}{
			{[]string{"SET", "a", "1", "NX", "PX", "1000"}, "OK"},
			{[]string{"SET", "a", "2", "NX"}, nil},
			{[]string{"SET", "a", "3", "XX", "GET", "KEEPTTL"}, "1"},
			{[]string{"PTTL", "a"}, int64(1000)},
			{[]string{"SET", "a", "x", "PX", "0"}, "ERR invalid expire time in 'set' command"},
			{[]string{"SET", "a", "x", "NX", "XX"}, "ERR syntax error"},
			{[]string{"INCR", "a"}, int64(4)},
			{[]string{"PTTL", "a"}, int64(1000)}, // INCR keeps the TTL
			{[]string{"SET", "s", "x"}, "OK"},
			{[]string{"INCR", "s"}, "ERR value is not an integer or out of range"},
			{[]string{"PEXPIRE", "a", "500", "GT"}, int64(0)},
			{[]string{"PEXPIRE", "a", "500", "LT"}, int64(1)},
			{[]string{"PTTL", "missing"}, int64(-2)},
			{[]string{"ZADD", "z", "2", "b", "1", "a"}, int64(2)},
			{[]string{"ZRANGEBYSCORE", "z", "-inf", "(2"}, []any{"a"}},
			{[]string{"ZRANK", "z", "b"}, int64(1)},
			{[]string{"ZSCORE", "z", "b"}, "2"},
			{[]string{"HSET", "h", "f", "v", "g", "w"}, int64(2)},
			{[]string{"HMGET", "h", "g", "nope"}, []any{"w", nil}},
			{[]string{"GET", "h"}, "WRONGTYPE Operation against a key holding the wrong kind of value"},
			{[]string{"EVAL", "return 1", "0"}, "ERR unknown command 'EVAL': dlmtest does not implement it (see dlmtest.Commands)"},
		} {
			if got := do(c.args...); !equal(got, c.want) {
				t.Errorf("%v: %#v, want %#v", c.args, got, c.want)
			}
		}
		time.Sleep(500 * time.Millisecond)
		if got := do("EXISTS", "a"); got != int64(0) {
			t.Errorf("EXISTS of a key past its PEXPIRE: %v, want 0", got)
		}
	})
}

func equal(a, b any) bool {
	x, ok1 := a.([]any)
	y, ok2 := b.([]any)
	if ok1 && ok2 {
		return slices.Equal(x, y)
	}
	return a == b
}

// TestClock: keys expire by their server's clock, which a test runs fast,
// slow or stopped, and jumps.
func TestClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		n := srv.Node()
		clock := srv.Clock()
		mustEval(t, n, setPX, []string{"a"}, "v", "8000")
		clock.SetRate(2)
		time.Sleep(3 * time.Second)
		if get(t, srv, "a") != "v" {
			t.Fatal("a key with 8s to live gone after 6s of a clock running at twice the rate")
		}
		time.Sleep(time.Second)
		if get(t, srv, "a") != nil {
			t.Fatal("a key with 8s to live still there after 8s of a clock running at twice the rate")
		}
		if off := clock.Offset(); off != 4*time.Second {
			t.Errorf("offset after 4s at rate 2: %v, want 4s", off)
		}
		clock.SetRate(0)
		mustEval(t, n, setPX, []string{"b"}, "v", "1000")
		time.Sleep(time.Hour)
		if get(t, srv, "b") != "v" {
			t.Fatal("a key expired on a stopped clock")
		}
		clock.Jump(time.Second)
		if get(t, srv, "b") != nil {
			t.Fatal("a key with 1s to live still there after its clock jumped 1s")
		}
	})
}

// TestClockJumpFreesLock: a server whose clock jumps forward frees a lock
// early, as Redis 7.0 does: the holder's lease is still valid when
// another client is granted the key.
func TestClockJumpFreesLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		mgr := func() *dlm.Manager {
			s, err := strategy.NewSingle(srv.Node())
			if err != nil {
				t.Fatal(err)
			}
			m, _ := dlm.New(s, dlm.WithTTL(10*time.Second))
			return m
		}
		a, b := mgr(), mgr()
		ctx := context.Background()
		held, err := a.TryLock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryLock(ctx, "k"); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Fatalf("TryLock of a held key: %v", err)
		}
		srv.Clock().Jump(11 * time.Second)
		second, err := b.TryLock(ctx, "k")
		if err != nil {
			t.Fatalf("TryLock after the server's clock jumped past the TTL: %v, want granted", err)
		}
		if held.Context().Err() != nil || second.Fence() <= held.Fence() {
			t.Errorf("after the jump: holder live %v (want true: its lease is still valid by true time), fences %d then %d", held.Context().Err() == nil, held.Fence(), second.Fence())
		}
		time.Sleep(time.Minute)
	})
}

// TestFaults: delays, lost replies, pauses, slowness and partitions, each
// on the calls it should touch and no other.
func TestFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		a, b := srv.Node(), srv.Node()
		const incr = "return {redis.call('INCR', KEYS[1])}"
		k := []string{"n"}

		a.SetDelay(2 * time.Second)
		if _, err := eval(a, time.Second, incr, k); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call with a 1s deadline and replies delayed 2s: %v, want context.DeadlineExceeded", err)
		}
		if get(t, srv, "n") != "1" {
			t.Error("the command whose reply was late did not run")
		}
		start := time.Now()
		if r, err := eval(a, 3*time.Second, incr, k); err != nil || r[0] != 2 || time.Since(start) != 2*time.Second {
			t.Errorf("a call with replies delayed 2s: %v %v after %v, want [2] after 2s", r, err, time.Since(start))
		}
		if r, err := eval(b, time.Second, incr, k); err != nil || r[0] != 3 {
			t.Errorf("the other client, not delayed: %v %v, want [3]", r, err)
		}
		a.SetDelay(0)

		a.DropReplies(1)
		if _, err := eval(a, time.Second, incr, k); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call whose reply is lost: %v, want context.DeadlineExceeded", err)
		}
		if r := mustEval(t, a, incr, k); r[0] != 5 {
			t.Errorf("after a lost reply: %v, want [5] (the lost call ran, the next one answers)", r)
		}

		a.Partition(true)
		if _, err := eval(a, time.Second, incr, k); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call of a partitioned client: %v, want context.DeadlineExceeded", err)
		}
		if r := mustEval(t, b, incr, k); r[0] != 6 {
			t.Errorf("the other client during the partition: %v, want [6] (the cut client's command never arrived)", r)
		}
		a.Partition(false)

		srv.Pause()
		if _, err := eval(b, time.Second, incr, k); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call to a paused server: %v, want context.DeadlineExceeded", err)
		}
		srv.Resume()
		if r := mustEval(t, b, incr, k); r[0] != 8 {
			t.Errorf("after Resume: %v, want [8] (the call sent while paused runs on Resume)", r)
		}

		srv.SetSlow(time.Second)
		start = time.Now()
		done := make(chan struct{})
		go func() { mustEval(t, a, incr, k); close(done) }()
		mustEval(t, b, incr, k)
		<-done
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("two calls to a server that takes 1s a command: %v, want 2s (one after the other)", took)
		}
	})
}

// TestRestart: a restart keeps or loses the data, always loses the script
// cache, and the amnesia guard sees it.
func TestRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		n := srv.Node()
		const src = "return {redis.call('INCR', KEYS[1])}"
		mustEval(t, n, src, []string{"n"})
		srv.Restart(true)
		if get(t, srv, "n") != "1" {
			t.Error("data lost by a restart that keeps it")
		}
		calls := []driver.Call{{SHA1: sha1Of(src), Keys: []string{"n"}}}
		n.Run(context.Background(), calls)
		if !errors.Is(calls[0].Err, driver.ErrNoScript) {
			t.Errorf("EVALSHA after a restart: %v, want NOSCRIPT", calls[0].Err)
		}
		srv.Restart(false)
		if get(t, srv, "n") != nil {
			t.Error("data kept by a restart without it")
		}

		// The amnesia guard quarantines a slot on a server that restarted
		// within the longest TTL.
		time.Sleep(time.Minute)
		s, err := strategy.NewSingle(n, strategy.WithMaxTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m, _ := dlm.New(s, dlm.WithTTL(10*time.Second))
		l, err := m.TryLock(context.Background(), "k")
		if err != nil {
			t.Fatalf("TryLock on a server up for a minute: %v", err)
		}
		_ = l.Unlock(context.Background())
		srv.Restart(false)
		if _, err := m.TryLock(context.Background(), "k"); !errors.Is(err, dlm.ErrNotAcquired) || errors.Is(err, dlm.ErrHeld) || !strings.Contains(err.Error(), "quarantined") {
			t.Errorf("TryLock right after a restart without data: %v, want a quarantine", err)
		}
		time.Sleep(31 * time.Second)
		if _, err := m.TryLock(context.Background(), "k"); err != nil {
			t.Errorf("TryLock after the quarantine: %v", err)
		}
		time.Sleep(time.Minute)
	})
}

func sha1Of(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// TestReplication: WAIT counts the replicas that got the writes, a lagging
// replica acknowledges late, a frozen one never, and a promoted replica
// has only what it received.
func TestReplication(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer(dlmtest.WithReplicas(2))
		defer srv.Close()
		n := srv.Node()
		r := srv.Replicas()
		runWait := func(key string, replicas int) (driver.Acks, time.Duration) {
			start := time.Now()
			calls := []driver.Call{{Source: setPX, Keys: []string{key}, Args: []string{"v", "60000"}}}
			acks, err := n.RunWait(context.Background(), calls, driver.Wait{Replicas: replicas, Timeout: 5 * time.Second})
			if err != nil || calls[0].Err != nil {
				t.Fatalf("RunWait: %v %v", err, calls[0].Err)
			}
			return acks, time.Since(start)
		}
		if acks, took := runWait("a", 2); acks.Replicas != 2 || took != 0 {
			t.Errorf("WAIT 2 with both replicas in step: %+v after %v, want 2 at once", acks, took)
		}
		r[0].SetLag(time.Second)
		if acks, took := runWait("b", 2); acks.Replicas != 2 || took != time.Second {
			t.Errorf("WAIT 2 with a replica 1s behind: %+v after %v, want 2 after 1s", acks, took)
		}
		r[1].Freeze(true)
		if acks, took := runWait("c", 2); acks.Replicas != 1 || took != 5*time.Second {
			t.Errorf("WAIT 2 with a frozen replica: %+v after %v, want 1 after the 5s timeout", acks, took)
		}
		if _, ok := r[1].Get("c"); ok {
			t.Error("a frozen replica received a write")
		}
		srv.Promote(r[1])
		if get(t, srv, "c") != nil || get(t, srv, "b") != "v" {
			t.Error("after promoting the frozen replica: want b (replicated before it froze) and not c")
		}
	})
}

// TestWaitAcrossPromotion: a WAIT in flight when a frozen replica, which
// never got the writes it waits for, is promoted fails as Redis fails it
// (UNBLOCKED): the new primary's replicas acknowledge its writes, not
// the lost ones.
func TestWaitAcrossPromotion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer(dlmtest.WithReplicas(2))
		defer srv.Close()
		r := srv.Replicas()
		r[0].Freeze(true)
		r[1].Freeze(true)
		done := make(chan error, 1)
		go func() {
			calls := []driver.Call{{Source: setPX, Keys: []string{"k"}, Args: []string{"v", "60000"}}}
			acks, err := srv.Node().RunWait(context.Background(), calls, driver.Wait{Replicas: 2, Timeout: 5 * time.Second})
			if err == nil && acks.Replicas >= 2 {
				err = fmt.Errorf("WAIT counted %d replicas for a write the promoted one never got", acks.Replicas)
			} else if err == nil {
				err = fmt.Errorf("WAIT answered %+v, want UNBLOCKED", acks)
			}
			done <- err
		}()
		time.Sleep(time.Second)
		srv.Promote(r[0])
		if err := <-done; err == nil || !strings.Contains(err.Error(), "UNBLOCKED") {
			t.Errorf("RunWait across a promotion: %v, want UNBLOCKED", err)
		}
		if get(t, srv, "k") != nil {
			t.Error("the promoted replica has the write it never received")
		}
	})
}

// TestWatch: messages published after Watch returned reach it, not while
// its client is cut off, and none after stop.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		n := srv.Node()
		var got []string
		stop, err := n.Watch(context.Background(), "ch", func(p string) { got = append(got, p) })
		if err != nil {
			t.Fatal(err)
		}
		const pub = "return {redis.call('PUBLISH', KEYS[1], ARGV[1])}"
		other := srv.Node()
		if r := mustEval(t, other, pub, []string{"ch"}, "one"); r[0] != 1 {
			t.Errorf("PUBLISH to one subscriber: %v", r)
		}
		n.Partition(true)
		mustEval(t, other, pub, []string{"ch"}, "lost")
		n.Partition(false)
		mustEval(t, other, pub, []string{"ch"}, "two")
		synctest.Wait()
		stop()
		stop()
		mustEval(t, other, pub, []string{"ch"}, "after stop")
		synctest.Wait()
		if !slices.Equal(got, []string{"one", "two"}) {
			t.Errorf("notified %q, want [one two]", got)
		}
		n.Partition(true)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := n.Watch(ctx, "ch", func(string) {}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Watch from a cut-off client: %v, want context.DeadlineExceeded", err)
		}
	})
}
