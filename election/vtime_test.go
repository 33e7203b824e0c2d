package election

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
)

// velection returns the election name of a new Manager on n (a client of
// its own, as another process's).
func velection(t *testing.T, n *dlmtest.Node, name string, opts ...dlm.Option) *Election {
	t.Helper()
	e, err := New(vtest.Manager(t, n, opts...), name)
	require.NoError(t, err)
	return e
}

// TestLeaderKilledReplaced: four candidates, each a client of its own;
// the leader dies (its client cut off) three times, and each time another
// leads within the TTL (and the millisecond or two a waiter adds to the
// holder's remaining lease before it tries again). An observer sees every
// leader, in order.
func TestLeaderKilledReplaced(t *testing.T) {
	const ttl = time.Second
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		e := velection(t, srv.Node(), "leader", dlm.WithTTL(ttl))
		octx, stopObserving := context.WithCancel(context.Background())
		defer stopObserving()
		observed := e.Observe(octx)
		require.Zero(t, (<-observed).Term, "a leader before any campaign")

		type elected struct {
			Leader
			at time.Time
		}
		elections := make(chan elected, 8)
		nodes := map[string]*dlmtest.Node{}
		stop, end := context.WithCancel(context.Background())
		defer end()
		for i := range 4 {
			v := fmt.Sprintf("candidate-%d", i)
			n := srv.Node()
			nodes[v] = n
			c := velection(t, n, "leader", dlm.WithTTL(ttl), dlm.WithAutoRenew(0.3, time.Hour))
			go func() {
				l, err := c.Campaign(stop, v)
				if err != nil {
					return // the test ended
				}
				elections <- elected{Leader{Term: l.Term(), Value: v}, time.Now()}
				select {
				case <-l.Context().Done():
				case <-stop.Done():
					_ = l.Resign(context.Background())
				}
			}()
		}
		leaders := []elected{<-elections}
		for range 3 {
			cur := leaders[len(leaders)-1]
			got, err := e.Leader(context.Background())
			require.NoError(t, err)
			require.Equal(t, cur.Leader, got)
			nodes[cur.Value].Partition(true) // its renewals reach the server no more
			killed := time.Now()
			l := <-elections
			require.LessOrEqual(t, l.at.Sub(killed), ttl+5*time.Millisecond, "%s leads %v after %s was cut off", l.Value, l.at.Sub(killed), cur.Value)
			require.Greater(t, l.Term, cur.Term)
			leaders = append(leaders, l)
		}
		// The observer: every leader, in order; vacancies only between them.
		var seen []Leader
		for len(seen) == 0 || seen[len(seen)-1].Term != leaders[len(leaders)-1].Term {
			seen = append(seen, <-observed)
		}
		var terms, want []uint64
		for _, l := range seen {
			if l.Term != 0 {
				terms = append(terms, l.Term)
			}
		}
		for _, l := range leaders {
			want = append(want, l.Term)
		}
		require.Equal(t, want, terms, "observed %v", seen)
	})
}

// TestResignHandsOver: a resigning leader hands over at once; observers see
// the vacancy between the two; with nobody campaigning there is no leader.
func TestResignHandsOver(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		e := velection(t, srv.Node(), "resign")
		ctx := context.Background()
		octx, stop := context.WithCancel(ctx)
		defer stop()
		observed := e.Observe(octx)
		require.Equal(t, Leader{}, <-observed)

		a, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, Leader{Term: a.Term(), Value: "a"}, <-observed)
		eb := velection(t, srv.Node(), "resign")
		bDone := vtest.Async(t, func() (*Leadership, error) { return eb.Campaign(ctx, "b") })
		synctest.Wait() // b waits
		resigned := time.Now()
		require.NoError(t, a.Resign(ctx))
		require.ErrorIs(t, context.Cause(a.Context()), dlm.ErrUnlocked)
		b, ok := <-bDone
		require.True(t, ok)
		require.Less(t, time.Since(resigned), vtest.Poll/10, "b learned of the resignation by polling")
		require.Equal(t, Leader{}, <-observed)
		require.Equal(t, Leader{Term: b.Term(), Value: "b"}, <-observed)
		got, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "b", got.Value)
		require.NoError(t, b.Resign(ctx))
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)
		require.Equal(t, Leader{}, <-observed)
	})
}

// TestLeadershipEndsWithItsLease: without renewal a leader's Context ends
// with its lease (ErrLost), before the server lets it go; then observers
// see a vacancy and it is no longer reported.
func TestLeadershipEndsWithItsLease(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		e := velection(t, srv.Node(), "lapse", dlm.WithTTL(300*time.Millisecond))
		ctx := context.Background()
		octx, stop := context.WithCancel(ctx)
		defer stop()
		observed := e.Observe(octx)
		require.Equal(t, Leader{}, <-observed)
		l, err := e.Campaign(ctx, strings.Repeat("x", MaxValueLen))
		require.NoError(t, err)
		require.Equal(t, Leader{Term: l.Term(), Value: l.Value()}, <-observed)
		got, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, l.Value(), got.Value)

		<-l.Context().Done()
		require.ErrorIs(t, context.Cause(l.Context()), dlm.ErrLost)
		ended := time.Now()
		require.Equal(t, Leader{}, <-observed, "the lapsed leader is still observed")
		require.False(t, time.Now().Before(ended), "a vacancy observed before the leader's Context ended")
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)
	})
}
