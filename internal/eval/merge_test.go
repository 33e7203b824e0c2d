package eval_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
)

// spy is a node that records the calls of every Run that reaches it, and
// says it routes as the node beneath.
type spy struct {
	driver.Node
	mu   sync.Mutex
	runs [][]driver.Call
}

func (s *spy) Routing() nodekit.Routing { return nodekit.RoutingOf(s.Node) }

func (s *spy) Run(ctx context.Context, calls []driver.Call) {
	s.mu.Lock()
	s.runs = append(s.runs, append([]driver.Call(nil), calls...))
	s.mu.Unlock()
	s.Node.Run(ctx, calls)
}

// fails raises a server error for the argument "boom" (INCR of a string),
// and otherwise replies like incr, from a prelude function.
var fails = eval.NewScript(`local function count(key) return redis.call('INCR', key) end
` + eval.BodyMark + `if ARGV[1] == 'boom' then
  redis.call('SET', KEYS[1], 'text')
end
return {tonumber(ARGV[1]) or -7, count(KEYS[1])}`)

func mergingNode(t *testing.T, addr string, scripts ...*eval.Script) (*eval.Node, *spy) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	s := &spy{Node: goredis.New(c)}
	return eval.Coalesce(s, 0, scripts...), s
}

// A merged script that replies with an integer (or with an array, by
// turns) gives each call what it would get alone: []int64{n} for n.
func TestMergedIntegerReplies(t *testing.T) {
	srv := redistest.Start(t)
	either := eval.NewScript("local n = redis.call('INCRBY', KEYS[1], tonumber(ARGV[1])) if n % 2 == 0 then return {n, -n} end return n")
	n, sp := mergingNode(t, srv.Addr, either)
	calls := make([]driver.Call, 10)
	for i := range calls {
		calls[i] = driver.Call{Keys: []string{fmt.Sprint("i", i)}, Args: []string{strconv.Itoa(i - 5)}}
	}
	either.RunMany(context.Background(), n, calls)
	for i, c := range calls {
		require.NoError(t, c.Err, "call %d", i)
		want := []int64{int64(i - 5)}
		if (i-5)%2 == 0 {
			want = []int64{int64(i - 5), int64(5 - i)}
		}
		assert.Equal(t, want, c.Reply, "call %d", i)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	require.NotEmpty(t, sp.runs)
	assert.Len(t, sp.runs[len(sp.runs)-1], 1, "the calls merged into one")
}

// Calls of one script in one Run go as one batch call, each with its own
// reply; the batch script goes by EVAL until the server has it, then by
// EVALSHA, and by EVAL again once after the server lost it.
func TestMergedCallsKeepTheirReplies(t *testing.T) {
	srv := redistest.Start(t)
	n, sp := mergingNode(t, srv.Addr, incr)
	for round := 1; round <= 2; round++ {
		calls := make([]driver.Call, 20)
		for i := range calls {
			calls[i] = driver.Call{Keys: []string{fmt.Sprint("m", i)}, Args: []string{strconv.Itoa(i)}}
		}
		incr.RunMany(context.Background(), n, calls)
		for i, c := range calls {
			require.NoError(t, c.Err, "call %d", i)
			assert.Equal(t, []int64{int64(i), int64(round)}, c.Reply, "call %d", i)
		}
	}
	require.NoError(t, srv.Client(t).ScriptFlush(context.Background()).Err())
	calls := []driver.Call{{Keys: []string{"m0"}, Args: []string{"7"}}, {Keys: []string{"m1"}, Args: []string{"8"}}}
	incr.RunMany(context.Background(), n, calls)
	assert.Equal(t, []int64{7, 3}, calls[0].Reply)
	assert.Equal(t, []int64{8, 3}, calls[1].Reply)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	// Round 1 by EVAL, round 2 by EVALSHA; after the flush: EVALSHA (NOSCRIPT), then EVAL.
	require.Len(t, sp.runs, 4)
	for i, r := range sp.runs {
		assert.Len(t, r, 1, "run %d: the calls merged into one", i)
		assert.Equal(t, i%3 == 0, r[0].Source != "", "run %d by EVAL", i)
	}
	assert.Len(t, sp.runs[0][0].Keys, 20)
}

// A call that raises an error inside a batch gets the server's error, sent
// again by itself; the others keep their replies. Calls of other scripts,
// and with other key or argument counts, are not merged with them.
func TestMergedCallErrsAlone(t *testing.T) {
	srv := redistest.Start(t)
	n, sp := mergingNode(t, srv.Addr, fails, incr)
	calls := []driver.Call{
		{SHA1: fails.SHA1(), Keys: []string{"a"}, Args: []string{"1"}},
		{SHA1: fails.SHA1(), Keys: []string{"b"}, Args: []string{"boom"}},
		{SHA1: incr.SHA1(), Keys: []string{"c"}, Args: []string{"3"}},
		{SHA1: fails.SHA1(), Keys: []string{"d"}, Args: []string{"4"}},
		{SHA1: fails.SHA1(), Keys: []string{"e"}, Args: []string{"5", "extra"}},
		{SHA1: incr.SHA1(), Keys: []string{"f"}, Args: []string{"6"}},
	}
	for i := range calls {
		calls[i].Source = "" // by SHA1, as nodekit sends them
	}
	loadAll(t, srv, n, fails, incr)
	sp.mu.Lock()
	sp.runs = nil
	sp.mu.Unlock()
	n.Run(context.Background(), calls)
	assert.Equal(t, []int64{1, 1}, calls[0].Reply)
	require.Error(t, calls[1].Err)
	assert.Contains(t, calls[1].Err.Error(), "not an integer")
	assert.Equal(t, []int64{3, 1}, calls[2].Reply)
	assert.Equal(t, []int64{4, 1}, calls[3].Reply)
	assert.Equal(t, []int64{5, 1}, calls[4].Reply)
	assert.Equal(t, []int64{6, 1}, calls[5].Reply)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	require.Len(t, sp.runs, 2, "the batches, then the failed call by itself")
	assert.Len(t, sp.runs[0], 3, "fails×3 merged, incr×2 merged, fails with two arguments alone")
	assert.Len(t, sp.runs[1], 1)
	assert.Equal(t, []string{"b"}, sp.runs[1][0].Keys)
}

// loadAll makes the server cache the scripts and their batch forms.
func loadAll(t *testing.T, srv *redistest.Server, n *eval.Node, scripts ...*eval.Script) {
	for _, s := range scripts {
		_, err := s.Run(context.Background(), n, []string{"load"}, "0")
		require.NoError(t, err)
		calls := []driver.Call{{Keys: []string{"load"}, Args: []string{"0"}}, {Keys: []string{"load"}, Args: []string{"0"}}}
		s.RunMany(context.Background(), n, calls)
		for _, c := range calls {
			require.NoError(t, c.Err)
		}
	}
	require.NoError(t, srv.Client(t).Del(context.Background(), "load").Err())
}

// On a Cluster node reached by a client of one server, calls of keys in
// different slots are refused together (CROSSSLOT): each is sent again by
// itself, and from then on the node merges only calls of one slot.
func TestMergedCallsAcrossSlotsOnAClusterNode(t *testing.T) {
	srv := redistest.StartCluster(t, 1)[0]
	n, sp := mergingNode(t, srv.Addr, incr)
	run := func(keys ...string) {
		calls := make([]driver.Call, len(keys))
		for i, k := range keys {
			calls[i] = driver.Call{Keys: []string{k}, Args: []string{strconv.Itoa(i)}}
		}
		incr.RunMany(context.Background(), n, calls)
		for i, c := range calls {
			require.NoError(t, c.Err, "call %d", i)
			assert.Equal(t, int64(i), c.Reply[0], "call %d", i)
		}
	}
	runs := func() [][]driver.Call {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		return sp.runs
	}
	run("{x}1", "{y}2", "{x}3")
	first := runs()
	require.GreaterOrEqual(t, len(first), 2)
	assert.Len(t, first[0], 1, "one batch")
	assert.Len(t, first[1], 3, "refused with CROSSSLOT: sent again one by one")
	run("{x}1", "{y}2", "{x}3")
	second := runs()[len(first)]
	require.Len(t, second, 2, "{x} merged, {y} alone")
	assert.Equal(t, []string{"{x}1", "{x}3"}, second[0].Keys)
}

// Calls of one key keep their order when merging moves others ahead: only
// the first call of each key merges.
func TestMergedCallsKeepEachKeysOrder(t *testing.T) {
	srv := redistest.Start(t)
	n, sp := mergingNode(t, srv.Addr, incr, fails)
	loadAll(t, srv, n, incr, fails)
	sp.mu.Lock()
	sp.runs = nil
	sp.mu.Unlock()
	// k is set to text by the second call and counted by the fourth,
	// which must come after it and fail; a and b merge.
	calls := []driver.Call{
		{SHA1: incr.SHA1(), Keys: []string{"a"}, Args: []string{"1"}},
		{SHA1: fails.SHA1(), Keys: []string{"k"}, Args: []string{"boom"}},
		{SHA1: incr.SHA1(), Keys: []string{"b"}, Args: []string{"3"}},
		{SHA1: incr.SHA1(), Keys: []string{"k"}, Args: []string{"4"}},
	}
	n.Run(context.Background(), calls)
	assert.Equal(t, []int64{1, 1}, calls[0].Reply)
	require.Error(t, calls[1].Err, "INCR of a string")
	assert.Equal(t, []int64{3, 1}, calls[2].Reply)
	require.Error(t, calls[3].Err, "k counted after the call that made it text")
	sp.mu.Lock()
	defer sp.mu.Unlock()
	require.NotEmpty(t, sp.runs)
	assert.Len(t, sp.runs[0], 3, "a+b merged; the calls of k by themselves, in order")
}
