package strategy_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	redigolib "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rueidislib "github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// deadlineDrivers build a node over a server with each driver, with the
// clients' default options (go-redis without ContextTimeoutEnabled: the
// driver must make the deadline real itself).
var deadlineDrivers = []struct {
	name string
	node func(t *testing.T, addr string) driver.Node
}{
	{"goredis", func(t *testing.T, addr string) driver.Node {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	}},
	{"redigo", func(t *testing.T, addr string) driver.Node {
		p := &redigolib.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redigolib.Conn, error) {
			return redigolib.DialContext(ctx, "tcp", addr)
		}}
		t.Cleanup(func() { _ = p.Close() })
		return redigo.New(p)
	}},
	{"rueidis", func(t *testing.T, addr string) driver.Node {
		c, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return rueidis.New(c)
	}},
}

// returnBy bounds a call with a 100ms deadline against frozen servers. It
// is far from the deadline on purpose: it tells a call that ends with its
// context from one that waits on the frozen server (which never answers),
// and a loaded 2-core machine under -race must not be able to cross it.
// How far past their deadline the calls returned is logged, not asserted.
const returnBy = 2 * time.Second

// Against frozen servers, every call fails once its context ends rather
// than waiting on the servers, on every strategy and driver; and once the
// servers thaw, no attempt made meanwhile has left a lock behind: the
// attempts' undo releases it, long before its one-minute TTL could (the
// wait for that is bounded by half the TTL, spent only on a failure; under
// load the undo's retries, a second apart, took more than the 2s this
// test once allowed). Each strategy and driver runs on servers of its own,
// side by side.
func TestCallsEndAtTheirDeadline(t *testing.T) {
	const deadline = 100 * time.Millisecond
	const ttl = time.Minute
	var mu sync.Mutex
	var overruns []time.Duration
	t.Cleanup(func() { // after the subtests
		if len(overruns) == 0 {
			return
		}
		slices.Sort(overruns)
		median := overruns[len(overruns)/2]
		t.Logf("%d calls past their %v deadline: median %v, largest %v", len(overruns), deadline,
			median.Round(time.Millisecond), overruns[len(overruns)-1].Round(time.Millisecond))
	})
	for _, d := range deadlineDrivers {
		for _, st := range []struct {
			name  string
			start func(t *testing.T) (s driver.Strategy, all, freeze []*redistest.Server)
		}{
			{"single", func(t *testing.T) (driver.Strategy, []*redistest.Server, []*redistest.Server) {
				srv := redistest.Start(t)
				s, err := strategy.NewSingle(d.node(t, srv.Addr))
				require.NoError(t, err)
				return s, []*redistest.Server{srv}, []*redistest.Server{srv}
			}},
			{"redlock", func(t *testing.T) (driver.Strategy, []*redistest.Server, []*redistest.Server) {
				srvs := redistest.StartN(t, 3)
				var nodes []driver.Node
				for _, s := range srvs {
					nodes = append(nodes, d.node(t, s.Addr))
				}
				s, err := strategy.NewRedlock(nodes)
				require.NoError(t, err)
				return s, srvs, srvs[:2] // a majority
			}},
			{"failover", func(t *testing.T) (driver.Strategy, []*redistest.Server, []*redistest.Server) {
				primary, replica := redistest.Start(t), redistest.Start(t)
				replica.ReplicaOf(t, primary)
				s, err := strategy.NewFailover(d.node(t, primary.Addr), strategy.WithWaitTimeout(20*time.Millisecond))
				require.NoError(t, err)
				return s, []*redistest.Server{primary}, []*redistest.Server{primary}
			}},
		} {
			t.Run(d.name+"/"+st.name, func(t *testing.T) {
				t.Parallel()
				s, all, frozen := st.start(t)
				m, err := dlm.New(s, dlm.WithTTL(ttl), dlm.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
				require.NoError(t, err)
				ctx := context.Background()
				// Lock, not TryLock: a first call over new connections may
				// outlast Redlock's initial per-node timeout on a loaded machine.
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				held, err := m.Lock(lctx, "held")
				require.NoError(t, err)
				for _, srv := range frozen {
					srv.Freeze(t)
				}
				thawed := false
				thaw := func() {
					if !thawed {
						for _, srv := range frozen {
							srv.Thaw(t)
						}
						thawed = true
					}
				}
				defer thaw()
				for _, op := range []struct {
					name string
					call func(ctx context.Context) error
				}{
					{"TryLock", func(ctx context.Context) error { _, err := m.TryLock(ctx, "other"); return err }},
					{"Lock", func(ctx context.Context) error { _, err := m.Lock(ctx, "other"); return err }},
					{"Extend", func(ctx context.Context) error { return held.Extend(ctx, ttl) }},
					{"Unlock", func(ctx context.Context) error { return held.Unlock(ctx) }},
				} {
					cctx, cancel := context.WithTimeout(ctx, deadline)
					start := time.Now()
					err := op.call(cctx)
					took := time.Since(start)
					cancel()
					assert.Error(t, err, op.name)
					assert.Less(t, took, returnBy, "%s took %v with a %v deadline: it waited on the frozen server", op.name, took, deadline)
					mu.Lock()
					overruns = append(overruns, took-deadline)
					mu.Unlock()
				}
				thaw()
				thawedAt := time.Now()
				for _, srv := range all {
					c := srv.Client(t)
					assert.Eventually(t, func() bool { return c.Exists(ctx, "dlm:{other}").Val() == 0 },
						ttl/2, 10*time.Millisecond, "an attempt left a lock on %s", srv.Addr)
				}
				t.Logf("no lock left %v after the thaw", time.Since(thawedAt).Round(time.Millisecond))
			})
		}
	}
}
