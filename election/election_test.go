package election

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

type candidate struct {
	Addr, Name, Value string
	TTL               time.Duration
}

// elected is what a candidate prints once it leads.
type elected struct {
	Value string
	Term  uint64
	At    int64 // Unix ns
}

func TestMain(m *testing.M) {
	redistest.RunChild(runCandidate)
	os.Exit(m.Run())
}

// runCandidate is a candidate process: it campaigns, prints its election,
// and leads until killed.
func runCandidate(c candidate) int {
	client := redis.NewClient(&redis.Options{Addr: c.Addr, ContextTimeoutEnabled: true})
	e := newElection(nil, client, c.Name, c.TTL, dlm.WithAutoRenew(0.3, time.Hour))
	l, err := e.Campaign(context.Background(), c.Value)
	if err != nil {
		fmt.Fprintln(os.Stderr, "campaign:", err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(elected{Value: c.Value, Term: l.Term(), At: time.Now().UnixNano()})
	<-l.Context().Done()
	fmt.Fprintln(os.Stderr, "leadership ended:", context.Cause(l.Context()))
	return 1
}

func newElection(t testing.TB, client *redis.Client, name string, ttl time.Duration, opts ...dlm.Option) *Election {
	single, err := strategy.NewSingle(goredis.New(client))
	redistest.Must(t, err)
	m, err := dlm.New(single, append([]dlm.Option{dlm.WithTTL(ttl)}, opts...)...)
	redistest.Must(t, err)
	e, err := New(m, name)
	redistest.Must(t, err)
	return e
}

// startCandidate starts a candidate process whose elections arrive on
// elections.
func startCandidate(t *testing.T, c candidate, elections chan<- elected) *exec.Cmd {
	cmd, out := redistest.StartChild(t, c)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e elected
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				elections <- e
			}
		}
	}()
	return cmd
}

// TestLeaderKilledReplaced: four candidate processes; the leader is killed
// (SIGKILL) three times, and each time another leads within the TTL plus a
// little. An observer sees every leader, in order.
func TestLeaderKilledReplaced(t *testing.T) {
	const ttl = time.Second
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newElection(t, c, "leader", ttl)
	octx, stopObserving := context.WithCancel(context.Background())
	defer stopObserving()
	observed := e.Observe(octx)
	first := <-observed
	require.Zero(t, first.Term, "a leader before any campaign")

	elections := make(chan elected, 8)
	procs := map[string]*exec.Cmd{}
	for i := range 4 {
		v := fmt.Sprintf("candidate-%d", i)
		procs[v] = startCandidate(t, candidate{Addr: srv.Addr, Name: "leader", Value: v, TTL: ttl}, elections)
	}
	var leaders []elected
	next := func() elected {
		select {
		case l := <-elections:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no leader within 10s")
		}
		panic("unreachable")
	}
	leaders = append(leaders, next())
	for range 3 {
		cur := leaders[len(leaders)-1]
		cur2, err := e.Leader(context.Background())
		require.NoError(t, err)
		require.Equal(t, Leader{Term: cur.Term, Value: cur.Value}, cur2)
		killed := time.Now()
		require.NoError(t, procs[cur.Value].Process.Kill())
		l := next()
		took := time.Unix(0, l.At).Sub(killed)
		t.Logf("%s killed; %s leads %v later, term %d", cur.Value, l.Value, took.Round(time.Millisecond), l.Term)
		if took > ttl+150*time.Millisecond {
			t.Errorf("a new leader %v after the leader was killed; want within the TTL (%v) and a round trip", took, ttl)
		}
		require.Greater(t, l.Term, cur.Term)
		leaders = append(leaders, l)
	}
	// The observer: every leader, in order; vacancies only between them.
	var seen []Leader
	deadline := time.After(5 * time.Second)
	for len(seen) == 0 || seen[len(seen)-1].Term != leaders[len(leaders)-1].Term {
		select {
		case l := <-observed:
			seen = append(seen, l)
		case <-deadline:
			t.Fatalf("observed %v; want the leaders %v", seen, leaders)
		}
	}
	var terms []uint64
	for _, l := range seen {
		if l.Term != 0 {
			terms = append(terms, l.Term)
		}
	}
	var want []uint64
	for _, l := range leaders {
		want = append(want, l.Term)
	}
	require.Equal(t, want, terms, "observed %v", seen)
}

// TestResignHandsOver: a resigning leader hands over at once; observers see
// the vacancy between the two; with nobody campaigning there is no leader.
func TestResignHandsOver(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	e := newElection(t, c, "resign", 10*time.Second)
	ctx := context.Background()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	observed := e.Observe(octx)
	require.Equal(t, Leader{}, <-observed)

	a, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, Leader{Term: a.Term(), Value: "a"}, <-observed)
	bDone := make(chan *Leadership, 1)
	go func() {
		b, err := e.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		bDone <- b
	}()
	time.Sleep(50 * time.Millisecond)
	resigned := time.Now()
	require.NoError(t, a.Resign(ctx))
	require.ErrorIs(t, context.Cause(a.Context()), dlm.ErrUnlocked)
	b := <-bDone
	require.NotNil(t, b)
	if took := time.Since(resigned); took > 200*time.Millisecond {
		t.Errorf("b led %v after a resigned", took)
	}
	require.Equal(t, Leader{}, <-observed)
	require.Equal(t, Leader{Term: b.Term(), Value: "b"}, <-observed)
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b", got.Value)
	require.NoError(t, b.Resign(ctx))
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	require.Equal(t, Leader{}, <-observed)
}

// TestLeadershipEndsWithItsLease: without renewal a leader's Context ends
// at its lease's end, and it is then no longer reported.
func TestLeadershipEndsWithItsLease(t *testing.T) {
	srv := redistest.Start(t)
	e := newElection(t, srv.Client(t), "lapse", 300*time.Millisecond)
	ctx := context.Background()
	l, err := e.Campaign(ctx, strings.Repeat("x", MaxValueLen))
	require.NoError(t, err)
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, l.Value(), got.Value)
	select {
	case <-l.Context().Done():
		require.ErrorIs(t, context.Cause(l.Context()), dlm.ErrLost)
	case <-time.After(time.Second):
		t.Fatal("the leadership outlived its lease")
	}
	time.Sleep(50 * time.Millisecond) // the server's expiry
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
}

func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	e := newElection(t, srv.Client(t), "bad", time.Second)
	_, err := e.Campaign(context.Background(), strings.Repeat("x", MaxValueLen+1))
	require.ErrorIs(t, err, dlm.ErrInvalid)

	nodes := make([]dlm.Node, 3)
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
}

// TryCampaign makes one attempt: refused while another leads, elected once
// the leader resigned.
func TestTryCampaign(t *testing.T) {
	c := redistest.Start(t).Client(t)
	e := newElection(t, c, "try", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := e.TryCampaign(ctx, "a")
	require.NoError(t, err)
	_, err = e.TryCampaign(ctx, "b")
	require.ErrorIs(t, err, dlm.ErrNotAcquired)
	require.NoError(t, ctx.Err(), "one attempt, not a campaign")
	require.NoError(t, a.Resign(ctx))
	b, err := e.TryCampaign(ctx, "b")
	require.NoError(t, err)
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, Leader{Term: b.Term(), Value: "b"}, got)
	require.NoError(t, b.Resign(ctx))
}
