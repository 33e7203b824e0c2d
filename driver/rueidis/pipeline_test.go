package rueidis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
)

func TestEvalSHAMany(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(t *testing.T) rueidis.ClientOption
	}{
		{"autopipelining", func(t *testing.T) rueidis.ClientOption {
			return rueidis.ClientOption{InitAddress: []string{redistest.Start(t).Addr}}
		}},
		{"pool", func(t *testing.T) rueidis.ClientOption {
			return rueidis.ClientOption{InitAddress: []string{redistest.Start(t).Addr}, DisableAutoPipelining: true}
		}},
		{"cluster", func(t *testing.T) rueidis.ClientOption {
			return rueidis.ClientOption{InitAddress: []string{redistest.StartCluster(t, 3)[0].Addr}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := rueidisnode.New(newClient(t, tc.opt(t)))
			var _ dlm.Pipeliner = n
			ctx := context.Background()
			s := dlm.NewScript("return {tonumber(ARGV[1]), redis.call('INCR', KEYS[1])}")
			calls := make([]dlm.ScriptCall, 50)
			for i := range calls {
				calls[i] = dlm.ScriptCall{Keys: []string{"k" + strconv.Itoa(i%7)}, Args: []string{strconv.Itoa(i)}}
			}
			// Not cached yet: every call meets NOSCRIPT, wrapped.
			res, err := n.EvalSHAMany(ctx, s.SHA1(), calls[:3])
			require.NoError(t, err)
			for i, r := range res {
				assert.ErrorIs(t, r.Err, dlm.ErrNoScript, "call %d", i)
			}
			// RunMany loads it and runs the rest again.
			res, err = s.RunMany(ctx, n, calls)
			require.NoError(t, err)
			require.Len(t, res, len(calls))
			perKey := map[string]int64{}
			for i, r := range res {
				require.NoError(t, r.Err, "call %d", i)
				perKey[calls[i].Keys[0]]++
				assert.Equal(t, []int64{int64(i), perKey[calls[i].Keys[0]]}, r.Reply, "call %d ran once, in order", i)
			}
			// A failing call does not fail the others; neither does one
			// whose keys span slots (an error on a Cluster, fine elsewhere).
			bad := dlm.NewScript("if ARGV[1] == 'x' then return redis.error_reply('boom') end return {1}")
			res, err = bad.RunMany(ctx, n, []dlm.ScriptCall{
				{Keys: []string{"a"}, Args: []string{"1"}},
				{Keys: []string{"a"}, Args: []string{"x"}},
				{Keys: []string{"a", "b"}, Args: []string{"2"}},
				{Keys: []string{"a"}, Args: []string{"3"}},
			})
			require.NoError(t, err)
			assert.Equal(t, []int64{1}, res[0].Reply)
			assert.ErrorContains(t, res[1].Err, "boom")
			if tc.name == "cluster" {
				assert.ErrorIs(t, res[2].Err, dlm.ErrInvalid)
			} else {
				assert.NoError(t, res[2].Err)
			}
			assert.Equal(t, []int64{1}, res[3].Reply)
			// Replies other than integers are refused.
			res, err = dlm.NewScript("return 'str'").RunMany(ctx, n, []dlm.ScriptCall{{Keys: []string{"a"}}})
			require.NoError(t, err)
			assert.Error(t, res[0].Err)
		})
	}
}

func TestEvalSHAManyContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opt      rueidis.ClientOption
		deadline bool
	}{
		{"autopipelining/deadline", rueidis.ClientOption{}, true},
		{"autopipelining/cancel", rueidis.ClientOption{}, false},
		{"pool/deadline", rueidis.ClientOption{DisableAutoPipelining: true}, true},
		{"pool/cancel", rueidis.ClientOption{DisableAutoPipelining: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			tc.opt.InitAddress = []string{srv.Addr}
			n := rueidisnode.New(newClient(t, tc.opt))
			_, err := n.Eval(context.Background(), "return {1}", nil)
			require.NoError(t, err)
			srv.Freeze(t)
			defer srv.Thaw(t)
			var ctx context.Context
			var cancel context.CancelFunc
			if tc.deadline {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			defer cancel()
			start := time.Now()
			res, err := n.EvalSHAMany(ctx, dlm.NewScript("return {1}").SHA1(), []dlm.ScriptCall{{Keys: []string{"a"}}, {Keys: []string{"b"}}})
			assert.Nil(t, res)
			want := context.Canceled
			if tc.deadline {
				want = context.DeadlineExceeded
			}
			assert.ErrorIs(t, err, want)
			assert.Less(t, time.Since(start), 2*time.Second)
		})
	}
}
