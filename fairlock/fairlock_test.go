package fairlock

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/mgr"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

type childSpec struct {
	Addr   string
	Key    string
	TTL    time.Duration
	Rounds int
	Hold   time.Duration
}

// A grant is one acquisition a child reports, times in Unix nanoseconds
// (one clock: every process runs on this machine).
type grant struct {
	Child    int
	Arrival  uint64
	Fence    uint64
	Asked    int64 // Lock called
	Got      int64 // Lock returned
	Released int64 // Unlock called
}

func TestMain(m *testing.M) {
	redistest.RunChild(runChild)
	os.Exit(m.Run())
}

// runChild is a waiter process: it takes the lock Rounds times, holding it
// Hold each time, and prints a grant per acquisition as a JSON line.
func runChild(spec childSpec) int {
	client := redis.NewClient(&redis.Options{Addr: spec.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	f := newFair(nil, client, spec.Key, spec.TTL)
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	for range spec.Rounds {
		g := grant{Child: os.Getpid(), Asked: time.Now().UnixNano()}
		l, arrival, err := f.lock(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lock:", err)
			return 1
		}
		g.Got, g.Arrival, g.Fence = time.Now().UnixNano(), arrival, l.Fence()
		time.Sleep(spec.Hold)
		g.Released = time.Now().UnixNano()
		if err := l.Unlock(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "unlock:", err)
			return 1
		}
		_ = out.Encode(g)
	}
	return 0
}

// newFair returns a FairLock on key over the single strategy, with TTL ttl.
func newFair(t testing.TB, client *redis.Client, key string, ttl time.Duration) *FairLock {
	single, err := strategy.NewSingle(goredis.New(client))
	redistest.Must(t, err)
	m, err := dlm.New(single, dlm.WithTTL(ttl))
	redistest.Must(t, err)
	f, err := New(m, key)
	redistest.Must(t, err)
	return f
}

// startChild starts a waiter process.
func startChild(t *testing.T, spec childSpec) (*exec.Cmd, *bufio.Scanner) {
	cmd, out := redistest.StartChild(t, spec)
	return cmd, bufio.NewScanner(out)
}

// TestArrivalOrderProcesses: the queue script on a real server, between
// processes: 8 processes take one key in turn; grants follow arrival order
// exactly and never overlap. (Waits are asserted in virtual time, by
// TestArrivalOrder.)
func TestArrivalOrderProcesses(t *testing.T) {
	const procs, rounds = 8, 6
	srv := redistest.Start(t)
	spec := childSpec{Addr: srv.Addr, Key: "fair8", TTL: 5 * time.Second, Rounds: rounds, Hold: 5 * time.Millisecond}
	var mu sync.Mutex
	var grants []grant
	var wg sync.WaitGroup
	for range procs {
		cmd, out := startChild(t, spec)
		wg.Go(func() {
			for out.Scan() {
				var g grant
				if json.Unmarshal(out.Bytes(), &g) == nil {
					mu.Lock()
					grants = append(grants, g)
					mu.Unlock()
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("child: %v", err)
			}
		})
	}
	wg.Wait()
	require.Len(t, grants, procs*rounds)
	slices.SortFunc(grants, func(a, b grant) int { return cmp.Compare(a.Fence, b.Fence) })
	for i := 1; i < len(grants); i++ {
		a, b := grants[i-1], grants[i]
		if b.Fence == a.Fence {
			t.Fatalf("fence %d granted twice", a.Fence)
		}
		if b.Arrival <= a.Arrival {
			t.Errorf("grant %d (fence %d) went to arrival %d, after arrival %d: out of arrival order", i, b.Fence, b.Arrival, a.Arrival)
		}
		if b.Got < a.Released {
			t.Errorf("fence %d granted %v before fence %d's holder released", b.Fence, time.Duration(a.Released-b.Got), a.Fence)
		}
	}
}

// TestNotOverRedlock: independent masters keep no one arrival order.
func TestNotOverRedlock(t *testing.T) {
	nodes := make([]driver.Node, 3)
	for i := range nodes {
		nodes[i] = goredis.New(redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)}))
	}
	rl, err := strategy.NewRedlock(nodes)
	require.NoError(t, err)
	m, err := dlm.New(rl)
	require.NoError(t, err)
	_, err = New(m, "k")
	require.ErrorIs(t, err, dlm.ErrInvalid)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = New(nil, "k")
	require.ErrorIs(t, err, dlm.ErrInvalid)
}

// TestLeaveMarks: the queue script on a real server: a waiter that leaves
// while others wait marks the held lock (keeping its TTL), so that its
// release publishes; one that leaves an empty queue does not.
func TestLeaveMarks(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	f := newFair(t, c, "marks", 10*time.Second)
	ctx := context.Background()
	l, err := f.TryLock(ctx) // joins, takes the lock, leaves an empty queue
	require.NoError(t, err)
	lock := f.keys[3]
	require.Equal(t, mgr.LockValue(l.Fence(), l.Token()), c.Get(ctx, lock).Val(), "marked, though nobody waits")
	for _, w := range []string{"w1", "w2"} {
		_, err := f.queue(ctx, w, false)
		require.NoError(t, err)
	}
	_, err = f.queue(ctx, "w1", true)
	require.NoError(t, err)
	require.Equal(t, "0"+mgr.LockValue(l.Fence(), l.Token()), c.Get(ctx, lock).Val(), "w2 waits: the lock is not marked")
	require.Greater(t, c.PTTL(ctx, lock).Val(), 9*time.Second, "marking lost the lock's TTL")
	_, err = f.queue(ctx, "w2", true)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}
