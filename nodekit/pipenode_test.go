package nodekit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/conformance/harness"
	rueidisnode "github.com/dlmgo/dlm/driver/rueidis"
	valkeynode "github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// The tests of nodekit.PipeNode, run over every driver built on it
// (driver/rueidis, driver/valkeygo): each in a subtest named after the
// driver.

// pipeOptions are the client options the tests set, named as both clients
// name them (ClientOption's InitAddress, Sentinel.MasterSet,
// DisableAutoPipelining…).
type pipeOptions struct {
	addrs             []string // InitAddress
	master            string   // Sentinel.MasterSet: addrs are Sentinels
	noAutoPipelining  bool
	noRetry           bool
	disableCache      bool
	blockingPoolSize  int
	pipelineMultiplex int
	maxFlushDelay     time.Duration
	username          string
	password          string
	// ConnWriteTimeout: the tests of deadlines set it far beyond their
	// bounds, so that a call the Node did not end at its context's end
	// would outlast the bound by a wide margin (the clients' default, 10s,
	// is close to what a loaded machine can stretch a bound of seconds to).
	connWriteTimeout time.Duration
}

// slowClient is the ConnWriteTimeout of the tests of deadlines, and
// atOnce their bound: a call the Node ended at its context's end (100ms or
// 200ms) returns well within atOnce, one it did not would take
// slowClient.
const (
	slowClient = 2 * time.Minute
	atOnce     = 30 * time.Second
)

// A pipeClient is a driver's Node over a new client.
type pipeClient struct {
	node  driver.Node
	known func() []string // the addresses the client knows now
	close func()          // closes the client
}

// A pipeDriver is one driver over nodekit.PipeNode.
type pipeDriver struct {
	name string
	// open returns a Node over a new client of o, closed at t's cleanup.
	open func(t testing.TB, o pipeOptions) pipeClient
	// dial is the driver's Dial.
	dial func(ctx context.Context, ep nodekit.Endpoint) (driver.Node, io.Closer, error)
	// newNil reports whether New(nil) returned nil.
	newNil func() bool
	// errClosing is the error of calls on a closed client.
	errClosing error
}

var pipeDrivers = []pipeDriver{
	{
		name: "rueidis",
		open: func(t testing.TB, o pipeOptions) pipeClient {
			opt := rueidis.ClientOption{InitAddress: o.addrs, DisableAutoPipelining: o.noAutoPipelining, DisableRetry: o.noRetry,
				DisableCache: o.disableCache, BlockingPoolSize: o.blockingPoolSize, PipelineMultiplex: o.pipelineMultiplex,
				MaxFlushDelay: o.maxFlushDelay, Username: o.username, Password: o.password, ConnWriteTimeout: o.connWriteTimeout}
			if o.master != "" {
				opt.Sentinel = rueidis.SentinelOption{MasterSet: o.master}
			}
			c, err := rueidis.NewClient(opt)
			if err != nil {
				t.Fatalf("rueidis.NewClient: %v", err)
			}
			t.Cleanup(c.Close)
			return pipeClient{rueidisnode.New(c), func() []string { return slices.Collect(maps.Keys(c.Nodes())) }, c.Close}
		},
		dial:       rueidisnode.Dial,
		newNil:     func() bool { return rueidisnode.New(nil) == nil },
		errClosing: rueidis.ErrClosing,
	},
	{
		name: "valkeygo",
		open: func(t testing.TB, o pipeOptions) pipeClient {
			opt := valkey.ClientOption{InitAddress: o.addrs, DisableAutoPipelining: o.noAutoPipelining, DisableRetry: o.noRetry,
				DisableCache: o.disableCache, BlockingPoolSize: o.blockingPoolSize, PipelineMultiplex: o.pipelineMultiplex,
				MaxFlushDelay: o.maxFlushDelay, Username: o.username, Password: o.password, ConnWriteTimeout: o.connWriteTimeout}
			if o.master != "" {
				opt.Sentinel = valkey.SentinelOption{MasterSet: o.master}
			}
			c, err := valkey.NewClient(opt)
			if err != nil {
				t.Fatalf("valkey.NewClient: %v", err)
			}
			t.Cleanup(c.Close)
			return pipeClient{valkeynode.New(c), func() []string { return slices.Collect(maps.Keys(c.Nodes())) }, c.Close}
		},
		dial:       valkeynode.Dial,
		newNil:     func() bool { return valkeynode.New(nil) == nil },
		errClosing: valkey.ErrClosing,
	},
}

// node is d.open's Node.
func (d pipeDriver) node(t testing.TB, o pipeOptions) driver.Node { return d.open(t, o).node }

// forEachDriver runs f once per driver, in a parallel subtest named after
// it: each owns its servers and clients (bounded by -parallel, GOMAXPROCS
// by default).
func forEachDriver(t *testing.T, f func(t *testing.T, d pipeDriver)) {
	for _, d := range pipeDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			f(t, d)
		})
	}
}

// runSource runs src with EVAL on n, as one Run call.
func runSource(ctx context.Context, n driver.Node, src string, keys ...string) ([]int64, error) {
	c := []driver.Call{{Source: src, Keys: keys}}
	n.Run(ctx, c)
	return c[0].Reply, c[0].Err
}

// conform runs both suites over one node of a deployment the test started;
// servers are the addresses its scripts reach.
func conform(t *testing.T, node driver.Node, servers ...string) {
	t.Run("Node", func(t *testing.T) {
		conformance.RunNode(t, func(*testing.T) driver.Node { return node })
	})
	single(t, node, servers...)
}

// single runs the strategy suite with the single-instance strategy.
func single(t *testing.T, node driver.Node, servers ...string) {
	t.Run("Single", func(t *testing.T) {
		topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: servers}
		newStrategy := func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) }
		conformance.RunStrategy(t, topology, newStrategy)
		family.Run(t, topology.Nodes, newStrategy)
	})
}

// The node rules over a standalone server, with each client's defaults,
// run in each driver's own TestConformance (driver/rueidis,
// driver/valkeygo); here the strategy's.
func TestPipeNodeConformanceStandalone(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		addr := harness.StartServer(t)
		single(t, d.node(t, pipeOptions{addrs: []string{addr}}), addr)
	})
}

// dialOptions give the harness d's Dial's ways to a server (the clients
// connect when they are made, and the error may be the dial's) and to a
// primary through Sentinel.
func (d pipeDriver) dialOptions() []harness.Option {
	return []harness.Option{
		harness.WithDial(func(t *testing.T, addr string) (driver.Node, error) {
			return d.dialed(t, nodekit.Endpoint{Addr: addr})
		}),
		harness.WithSentinel(func(t *testing.T, addrs []string, master string) (driver.Node, error) {
			return d.dialed(t, nodekit.Endpoint{Sentinels: addrs, Master: master})
		}),
	}
}

func (d pipeDriver) dialed(t *testing.T, ep nodekit.Endpoint) (driver.Node, error) {
	n, c, err := d.dial(context.Background(), ep)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return n, err
}

func TestPipeNodeConformanceNoAutoPipelining(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		harness.Run(t, func(t *testing.T, addr string) driver.Node {
			return d.node(t, pipeOptions{addrs: []string{addr}, noAutoPipelining: true})
		}, d.dialOptions()...)
	})
}

func TestPipeNodeConformanceSentinel(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		primary := redistest.Start(t)
		sentinel := redistest.StartSentinel(t, "mymaster", primary, 1, time.Second)
		node := d.node(t, pipeOptions{addrs: []string{sentinel.Addr}, master: "mymaster"})
		if name := fmt.Sprint(node); !strings.Contains(name, primary.Addr) {
			t.Errorf("a Sentinel client's node is named %q, want the primary's address %s in it", name, primary.Addr)
		}
		conform(t, node, primary.Addr)
	})
}

// TestPipeNodeCluster runs, per driver, on one Cluster of three masters
// (a Cluster takes seconds to form, and these used to start one each): the
// node and strategy suites, then, each on masters emptied of keys and
// scripts, a call whose keys span slots (ErrInvalid, not a panic),
// runMany, clusterRunWait and clusterWatch.
func TestPipeNodeCluster(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		nodes := redistest.StartCluster(t, 3)
		addrs := make([]string, len(nodes))
		for i, n := range nodes {
			addrs[i] = n.Addr
		}
		conform(t, d.node(t, pipeOptions{addrs: []string{nodes[0].Addr}}), addrs...)
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, d pipeDriver, nodes []*redistest.Server)
		}{
			{"KeysInDifferentSlots", func(t *testing.T, d pipeDriver, nodes []*redistest.Server) {
				n := d.node(t, pipeOptions{addrs: []string{nodes[0].Addr}})
				_, err := runSource(context.Background(), n, "return {1}", "a", "b")
				if !errors.Is(err, driver.ErrInvalid) {
					t.Fatalf("keys in different slots: %v, want an error matching dlm.ErrInvalid, not a panic", err)
				}
			}},
			{"RunMany", func(t *testing.T, d pipeDriver, nodes []*redistest.Server) {
				runMany(t, d.node(t, pipeOptions{addrs: []string{nodes[0].Addr}}), true)
			}},
			{"RunWait", clusterRunWait},
			{"Watch", clusterWatch},
		} {
			t.Run(tc.name, func(t *testing.T) {
				emptyMasters(t, nodes)
				tc.run(t, d, nodes)
			})
		}
	})
}

// emptyMasters deletes every key and script of the Cluster's masters, so
// that a test on a shared Cluster begins as on a new one.
func emptyMasters(t *testing.T, masters []*redistest.Server) {
	t.Helper()
	ctx := context.Background()
	for _, m := range masters {
		c := m.Client(t)
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL on %s: %v", m.Addr, err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH on %s: %v", m.Addr, err)
		}
	}
}

func TestPipeNodeNilClient(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		if !d.newNil() {
			t.Fatal("New(nil) is not nil")
		}
	})
}

// A frozen server (SIGSTOP) never answers; the call returns at its
// deadline (well within atOnce; the client's own timeout is slowClient).
func TestPipeNodeDeadlineOnFrozenServer(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		for _, auto := range []bool{true, false} {
			srv := redistest.Start(t)
			n := d.node(t, pipeOptions{addrs: []string{srv.Addr}, noAutoPipelining: !auto, connWriteTimeout: slowClient})
			if _, err := runSource(context.Background(), n, "return {1}"); err != nil {
				t.Fatal(err)
			}
			srv.Freeze(t)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			start := time.Now()
			_, err := runSource(ctx, n, "return {1}")
			took := time.Since(start)
			cancel()
			srv.Thaw(t)
			if !errors.Is(err, context.DeadlineExceeded) || took > atOnce {
				t.Errorf("auto-pipelining %v: Eval on a frozen server: %v after %v, want context.DeadlineExceeded near 100ms", auto, err, took)
			}
		}
	})
}

// After a call that timed out on a frozen server, the client reopens its
// connection on the next call, and a caller that comes during that dial
// would wait for it under the dialing caller's deadline: such a caller
// still returns at its own deadline, while the first is still waiting.
func TestPipeNodeDeadlineWhileAnotherRedials(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		srv := redistest.Start(t)
		proxy := redistest.StartProxy(t, srv.Addr) // counts the client's dials
		n := d.node(t, pipeOptions{addrs: []string{proxy.Addr}})
		if _, err := runSource(context.Background(), n, "return 1"); err != nil {
			t.Fatal(err)
		}
		srv.Freeze(t)
		defer srv.Thaw(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := runSource(ctx, n, "return 1")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a call to the frozen server: %v, want context.DeadlineExceeded", err)
		}

		long, cancelLong := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancelLong()
		dials := proxy.Accepted()
		longDone := make(chan error, 1)
		go func() {
			_, err := runSource(long, n, "return 1")
			longDone <- err
		}()
		for proxy.Accepted() == dials { // until the long call reopens the connection
			select {
			case err := <-longDone:
				t.Fatalf("the long call returned without reopening the connection (%v)", err)
			case <-time.After(time.Millisecond):
			}
		}
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = runSource(ctx, n, "return 1")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the short call: %v, want context.DeadlineExceeded", err)
		}
		select {
		case err := <-longDone:
			t.Fatalf("the short call returned only after the long one (%v)", err)
		default:
		}
		cancelLong()
		<-longDone
	})
}

// Issue 33: against a Sentinel's port rueidis and valkey-go word "ERR unknown command"
// without "ERR "; Lock still ends at once with a permanent error instead
// of waiting out its context.
func TestPipeNodeLockEndsAtOnceOnASentinelsPort(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		sentinel := redistest.StartSentinel(t, "mymaster", redistest.Start(t), 1, 5*time.Second)
		n, c, err := d.dial(context.Background(), nodekit.Endpoint{Addr: sentinel.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		s, err := strategy.NewSingle(n)
		if err != nil {
			t.Fatal(err)
		}
		m, err := dlm.New(s)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*atOnce) // only a Lock that waits out its context takes it
		defer cancel()
		_, err = m.Lock(ctx, "k")
		if !dlm.Permanent(err) || ctx.Err() != nil || !strings.Contains(err.Error(), "unknown command") {
			t.Fatalf("Lock on a Sentinel's port: %v (permanent: %v; context: %v), want a permanent unknown command before the context ends", err, dlm.Permanent(err), ctx.Err())
		}
	})
}

// TestPipeNodeConformanceRedlock runs the strategy suite with Redlock over
// three servers (quorum two), one client each.
func TestPipeNodeConformanceRedlock(t *testing.T) {
	t.Parallel() // the suites mostly wait: on stalled servers, deadlines, expiry
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		var nodes []driver.Node
		var servers []string
		for range 3 {
			srv := redistest.Start(t)
			nodes = append(nodes, d.node(t, pipeOptions{addrs: []string{srv.Addr}, disableCache: true}))
			servers = append(servers, srv.Addr)
		}
		topology := conformance.Topology{Nodes: func(*testing.T) []driver.Node { return nodes }, Quorum: 2, Servers: servers}
		newStrategy := func(nodes []driver.Node) (driver.Strategy, error) {
			return strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
		}
		conformance.RunStrategy(t, topology, newStrategy)
		family.Run(t, topology.Nodes, newStrategy)
	})
}
