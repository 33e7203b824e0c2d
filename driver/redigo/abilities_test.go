package redigo_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// incr writes, so WAIT after it has something to count.
const incr = "return {redis.call('INCR', KEYS[1])}"

func get(t *testing.T, addr, key string) string {
	t.Helper()
	c, err := redis.Dial("tcp", addr, redis.DialReadTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := redis.String(c.Do("GET", key))
	if err != nil {
		t.Fatalf("GET %s on %s: %v", key, addr, err)
	}
	return v
}

// evalWait runs src once on n with EVAL and then w's command.
func evalWait(ctx context.Context, n driver.Node, w driver.Wait, src string, keys []string) ([]int64, driver.Acks, error) {
	c := []driver.Call{{Source: src, Keys: keys}}
	acks, err := n.RunWait(ctx, c, w)
	return c[0].Reply, acks, err
}

func TestRunWait(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2})
	ctx := context.Background()
	pool := newPool(t, topo.Primary.Addr)
	n := redigo.New(pool).WithName(topo.Primary.Addr)
	all := driver.Wait{Replicas: 2, Timeout: 2 * time.Second}

	t.Run("acknowledged by every replica", func(t *testing.T) {
		r, acks, err := evalWait(ctx, n, all, incr, []string{"ew"})
		if err != nil || !slices.Equal(r, []int64{1}) || acks != (driver.Acks{Replicas: 2}) {
			t.Fatalf("RunWait: %v %+v %v, want [1] {Replicas:2} nil", r, acks, err)
		}
		for _, rep := range topo.Replicas {
			if v := get(t, rep.Addr, "ew"); v != "1" {
				t.Errorf("replica %s has ew=%q after the acknowledgement, want 1", rep.Addr, v)
			}
		}
		sc := eval.NewScript(incr)
		unknown := []driver.Call{{SHA1: eval.NewScript("return {7} -- new").SHA1()}}
		if _, err := n.RunWait(ctx, unknown, all); !errors.Is(err, driver.ErrNoScript) || !errors.Is(unknown[0].Err, driver.ErrNoScript) {
			t.Errorf("RunWait of an unknown script: %v (call: %v), want ErrNoScript", err, unknown[0].Err)
		}
		r, acks, err = sc.RunWait(ctx, n, all, []string{"ew"})
		if err != nil || !slices.Equal(r, []int64{2}) || acks.Replicas != 2 {
			t.Fatalf("RunWait: %v %+v %v, want [2] 2 replicas", r, acks, err)
		}
		// The connection went back to the pool in step: a plain call on it works.
		if r, err := runSource(ctx, n, "return {5}", nil); err != nil || !slices.Equal(r, []int64{5}) {
			t.Fatalf("Run after RunWait: %v %v", r, err)
		}
	})

	t.Run("a script error has zero acks", func(t *testing.T) {
		_, acks, err := evalWait(ctx, n, all, "return redis.error_reply('boom')", nil)
		if err == nil || errors.Is(err, driver.ErrNoScript) || acks != (driver.Acks{}) {
			t.Fatalf("RunWait of an erroring script: %+v %v", acks, err)
		}
		if r, err := runSource(ctx, n, "return {6}", nil); err != nil || !slices.Equal(r, []int64{6}) {
			t.Fatalf("Run after a script error: %v %v (WAIT's reply left unread?)", r, err)
		}
	})

	t.Run("a failed wait keeps the script's reply", func(t *testing.T) {
		r, _, err := evalWait(ctx, n, driver.Wait{Replicas: 1, Timeout: time.Second, AOF: true}, incr, []string{"aof"})
		if err == nil {
			t.Skip("this server offers WAITAOF")
		}
		if !slices.Equal(r, []int64{1}) {
			t.Fatalf("RunWait with an unknown WAITAOF: reply %v (%v), want [1]: the caller must be able to undo the script", r, err)
		}
	})

	t.Run("bad waits are refused", func(t *testing.T) {
		for _, bad := range []driver.Wait{{Replicas: 1}, {Replicas: -1, Timeout: time.Second}, {Timeout: time.Second, Local: true}} {
			c := []driver.Call{{Source: incr, Keys: []string{"bad"}, Reply: []int64{9}}}
			if _, err := n.RunWait(ctx, c, bad); !errors.Is(err, driver.ErrInvalid) || !errors.Is(c[0].Err, driver.ErrInvalid) || c[0].Reply != nil {
				t.Errorf("%+v: %v, call %+v; want ErrInvalid on both", bad, err, c[0])
			}
		}
	})

	t.Run("a frozen replica does not acknowledge", func(t *testing.T) {
		topo.Replicas[1].Freeze(t)
		defer topo.Replicas[1].Thaw(t)
		r, acks, err := evalWait(ctx, n, driver.Wait{Replicas: 2, Timeout: 300 * time.Millisecond}, incr, []string{"frozen"})
		if err != nil || !slices.Equal(r, []int64{1}) {
			t.Fatalf("RunWait: %v %v", r, err)
		}
		if acks.Replicas != 1 {
			t.Fatalf("acks %+v with one of two replicas frozen, want 1", acks)
		}
	})

	t.Run("the context bounds a blocked WAIT", func(t *testing.T) {
		topo.Replicas[0].Freeze(t)
		defer topo.Replicas[0].Thaw(t)
		before := pool.Stats().IdleCount
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, _, err := evalWait(cctx, n, driver.Wait{Replicas: 2, Timeout: 10 * time.Second}, incr, []string{"blocked"})
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
			t.Fatalf("RunWait blocked in WAIT: %v %v after %v, want DeadlineExceeded near 200ms", r, err, took)
		}
		if !slices.Equal(r, []int64{1}) {
			t.Errorf("RunWait blocked in WAIT: the script's reply %v arrived but was not kept", r)
		}
		if after := pool.Stats().IdleCount; after >= before {
			t.Errorf("idle connections %d before and %d after: the connection with WAIT's reply unread went back to the pool", before, after)
		}
	})
}

func TestRunMany(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	pool := newPool(t, srv.Addr)
	n := redigo.New(pool).WithName(srv.Addr)
	sc := eval.NewScript("return {tonumber(ARGV[1]), redis.call('INCR', KEYS[1])}")
	calls := make([]driver.Call, 500)
	for i := range calls {
		calls[i] = driver.Call{SHA1: sc.SHA1(), Keys: []string{"m" + strconv.Itoa(i%7)}, Args: []string{strconv.Itoa(i)}}
	}
	n.Run(ctx, calls)
	for i, c := range calls {
		if !errors.Is(c.Err, driver.ErrNoScript) || c.Reply != nil {
			t.Fatalf("call %d of an unknown script: %+v, want ErrNoScript", i, c)
		}
	}
	sc.RunMany(ctx, n, calls)
	counts := map[string]int64{}
	for i, c := range calls {
		counts[c.Keys[0]]++
		if want := []int64{int64(i), counts[c.Keys[0]]}; c.Err != nil || !slices.Equal(c.Reply, want) {
			t.Fatalf("call %d: %+v, want %v", i, c, want)
		}
	}
	before := pool.Stats()
	n.Run(ctx, nil)
	if after := pool.Stats(); after != before {
		t.Fatalf("an empty batch used the pool: stats %+v before, %+v after", before, after)
	}

	srv.Freeze(t)
	cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	n.Run(cctx, calls)
	took := time.Since(start)
	srv.Thaw(t)
	for i, c := range calls {
		if !errors.Is(c.Err, context.DeadlineExceeded) || c.Reply != nil || took > 3*time.Second {
			t.Fatalf("call %d on a frozen server: %+v after %v, want DeadlineExceeded near 150ms", i, c, took)
		}
	}
	// The batch's replies come once the server thaws; none reaches a later
	// caller, whose connection must not be the one they arrive on.
	for i := range 50 {
		arg := "late" + strconv.Itoa(i)
		if r, err := runSource(ctx, n, "return {tonumber(string.sub(ARGV[1], 5))}", nil, arg); err != nil || !slices.Equal(r, []int64{int64(i)}) {
			t.Fatalf("call %d after a batch cut short: %v %v, want [%d] (a reply of the earlier batch?)", i, r, err, i)
		}
	}
}

func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	n := newNode(t, srv.Addr)
	pub := func(ch, msg string) {
		t.Helper()
		_, err := runSource(ctx, n, "redis.call('PUBLISH', KEYS[1], ARGV[1]) return {}", []string{ch}, msg)
		if err != nil { // a pooled connection from before a restart: once more
			_, err = runSource(ctx, n, "redis.call('PUBLISH', KEYS[1], ARGV[1]) return {}", []string{ch}, msg)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string, 16)
	stop, err := n.Watch(ctx, "ch1", func(p string) { got <- "a:" + p })
	if err != nil {
		t.Fatal(err)
	}
	stop2, err := n.Watch(ctx, "ch1", func(p string) { got <- "b:" + p })
	if err != nil {
		t.Fatal(err)
	}
	pub("ch1", "x")
	pub("other", "y")
	var seen []string
	for range 2 {
		select {
		case m := <-got:
			seen = append(seen, m)
		case <-time.After(5 * time.Second):
			t.Fatalf("messages after Watch returned: got %v, want a:x and b:x", seen)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"a:x", "b:x"}) {
		t.Fatalf("got %v, want [a:x b:x]", seen)
	}
	stop()
	stop() // again: nothing
	pub("ch1", "z")
	select {
	case m := <-got:
		if m != "b:z" {
			t.Fatalf("after the first stop got %q, want only b:z", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second watcher lost its message when the first stopped")
	}
	stop2()
	pub("ch1", "w")
	select {
	case m := <-got:
		t.Fatalf("after stop got %q", m)
	case <-time.After(200 * time.Millisecond):
	}

	// A server restart breaks the connection; the Watch made before it is
	// subscribed again, and one made after it shares the new connection.
	stop3, err := n.Watch(ctx, "ch2", func(p string) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		stop4, err := n.Watch(cctx, "ch2", func(p string) { got <- "new:" + p })
		cancel()
		if err == nil {
			defer stop4()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Watch after a restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pub("ch2", "v")
	seen = nil
	for len(seen) < 2 {
		select {
		case m := <-got:
			seen = append(seen, m)
		case <-time.After(5 * time.Second):
			t.Fatalf("after the restart got %v, want v (Watch from before) and new:v (Watch from after)", seen)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"new:v", "v"}) {
		t.Fatalf("after the restart got %v, want [new:v v]", seen)
	}
}

// The single-instance strategy over redigo wakes watchers on release.
func TestWatchRelease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := strategy.NewSingle(newNode(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan struct{}, 8)
	stop, err := s.WatchRelease(ctx, "wr", func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("WatchRelease: %v", err)
	}
	defer stop()
	if _, err := s.Acquire(ctx, "wr", "tok", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "wr", "waiter", 10*time.Second); err == nil {
		t.Fatal("a second token acquired a held lock") // its refusal makes the release publish
	}
	for len(woken) > 0 { // a hint on acquisition is allowed; drain it
		<-woken
	}
	if err := s.Release(ctx, "wr", "tok"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification within 5s of the release")
	}
}

// Watches that start and stop concurrently on a few channels each get the
// message published after their Watch returned: a SUBSCRIBE is confirmed by
// its own reply, not by that of an earlier SUBSCRIBE of the same channel
// that an UNSUBSCRIBE followed.
func TestWatchChurn(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	n := newNode(t, srv.Addr)
	const goroutines, rounds = 16, 10
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			errs <- func() error {
				ch := "churn" + strconv.Itoa(g%3)
				for r := range rounds {
					want := strconv.Itoa(g) + "/" + strconv.Itoa(r)
					got := make(chan struct{}, 1)
					stop, err := n.Watch(ctx, ch, func(p string) {
						if p == want {
							got <- struct{}{}
						}
					})
					if err != nil {
						return err
					}
					if _, err := runSource(ctx, n, "redis.call('PUBLISH', KEYS[1], ARGV[1]) return {}", []string{ch}, want); err != nil {
						stop()
						return err
					}
					select {
					case <-got:
					case <-time.After(5 * time.Second):
						stop()
						return errors.New("message " + want + " published after Watch returned was not delivered")
					}
					stop()
				}
				return nil
			}()
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// The subscription connection is killed: the channel is subscribed again on
// a new one (by the Hub), and messages published afterwards arrive. Once
// every Watch stopped, the connection is closed and its reader ends.
func TestWatchReconnect(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	n := newNode(t, srv.Addr)
	admin, err := redis.Dial("tcp", srv.Addr, redis.DialReadTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	numsub := func() int {
		v, err := redis.Values(admin.Do("PUBSUB", "NUMSUB", "ch"))
		if err != nil || len(v) != 2 {
			t.Fatalf("PUBSUB NUMSUB: %v %v", v, err)
		}
		k, _ := redis.Int(v[1], nil)
		return k
	}
	waitNumsub := func(want int, why string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); numsub() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d subscribers to ch after 5s, want %d", why, numsub(), want)
			}
		}
	}

	got := make(chan string, 10)
	stop, err := n.Watch(ctx, "ch", func(p string) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	killed, err := redis.Int(admin.Do("CLIENT", "KILL", "TYPE", "pubsub"))
	if err != nil || killed != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub: killed %d, %v; want the one subscription connection", killed, err)
	}
	waitNumsub(1, "after the connection was killed")
	if _, err := admin.Do("PUBLISH", "ch", "back"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "back" {
			t.Fatalf("got %q, want %q", p, "back")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a message published after the subscription came back was not delivered")
	}

	// A second Watch shares the renewed subscription; stopping both ends it.
	stop2, err := n.Watch(ctx, "ch", func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stop2()
	waitNumsub(0, "after both Watches stopped")
	// A second after the last stop (nodekit.HubLinger) the connection closes.
	for deadline := time.Now().Add(nodekit.HubLinger + 5*time.Second); ; time.Sleep(20 * time.Millisecond) {
		clients, err := redis.String(admin.Do("CLIENT", "LIST", "TYPE", "pubsub"))
		if err != nil {
			t.Fatal(err)
		}
		readers := receivers()
		if clients == "" && readers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the last stop: pubsub clients %q, %d receive goroutines; want none", nodekit.HubLinger+5*time.Second, clients, readers)
		}
	}
}

// receivers counts the goroutines reading a subscription connection.
func receivers() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "driver/redigo.pubSub.receive")
}

// A server that refuses SUBSCRIBE (an ACL user without the channel): Watch
// fails at once with the server's error, and other channels, subscribed on
// the same connection before and after, still work.
func TestWatchRefused(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "resetchannels", "&allowed*", "+@all", "~*").Err(); err != nil {
		t.Fatal(err)
	}
	p := &redis.Pool{MaxIdle: 2, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", srv.Addr, redis.DialUsername("limited"), redis.DialPassword("pw"))
	}}
	t.Cleanup(func() { _ = p.Close() })
	n := redigo.New(p)
	got := make(chan string, 2)
	stop1, err := n.Watch(ctx, "allowed1", func(m string) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer stop1()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := n.Watch(wctx, "forbidden", func(string) {}); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Watch of a forbidden channel: %v, want NOPERM", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	stop2, err := n.Watch(ctx, "allowed2", func(m string) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	for _, ch := range []string{"allowed1", "allowed2"} {
		if err := admin.Publish(ctx, ch, ch).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != ch {
				t.Errorf("got %q, want %q", m, ch)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no message on %s after the refusal", ch)
		}
	}
}
