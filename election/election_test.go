package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/strategy"
)

func newElection(t testing.TB, client *redis.Client, name string, ttl time.Duration, opts ...dlm.Option) *Election {
	single, err := strategy.NewSingle(goredis.New(client))
	redistest.Must(t, err)
	m, err := dlm.New(single, append([]dlm.Option{dlm.WithTTL(ttl)}, opts...)...)
	redistest.Must(t, err)
	e, err := New(m, name)
	redistest.Must(t, err)
	return e
}

func TestBadInput(t *testing.T) {
	srv := dlmtest.NewServer()
	defer srv.Close()
	e, err := New(vtest.Manager(t, srv.Node()), "bad")
	require.NoError(t, err)
	_, err = e.Campaign(context.Background(), strings.Repeat("x", MaxValueLen+1))
	require.ErrorIs(t, err, dlm.ErrInvalid)

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
}

// TryCampaign makes one attempt (the election's scripts on a real server): refused while another leads, elected once
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
