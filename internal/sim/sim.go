package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/mgr"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/semaphore"
	"github.com/dlmgo/dlm/strategy"
)

// A Deployment is a strategy over its servers.
type Deployment int

const (
	Single Deployment = iota
	Redlock3
	Redlock5
	FailoverAll      // a primary with 2 replicas, AckAll
	FailoverMajority // AckMajority
	FailoverNone     // AckNone
	numDeployments
)

func (d Deployment) String() string {
	return [...]string{"single", "redlock3", "redlock5", "failover-all", "failover-majority", "failover-none"}[d]
}

func (d Deployment) servers() int {
	switch d {
	case Redlock3:
		return 3
	case Redlock5:
		return 5
	}
	return 1
}

func (d Deployment) failover() bool { return d >= FailoverAll }

// A Config says what a run deploys; Plan draws one from a seed.
type Config struct {
	Deployment Deployment
	Guard      bool          // the amnesia guard (strategy.WithMaxTTL(TTL))
	Clients    int           // Managers, each with its own Nodes
	Workers    int           // goroutines per Manager taking the lock
	Renew      bool          // auto-renewal (every client)
	LongHolds  bool          // every hold lasts 2 to 5 TTLs
	TTL        time.Duration // the locks' TTL
	Faulty     time.Duration // how long faults may strike; all heal then
	Prim       Prim          // what the workers take
	Bug        Bug           // a planted bug (None: the real strategies)
}

func (c Config) String() string {
	return fmt.Sprintf("%s %s guard=%v clients=%d workers=%d renew=%v ttl=%v faulty=%v bug=%s",
		c.Deployment, c.Prim, c.Guard, c.Clients, c.Workers, c.Renew, c.TTL, c.Faulty, c.Bug)
}

// FaultKind names a fault.
type FaultKind int

const (
	ServerDelay   FaultKind = iota // every reply of a server late by Size
	ServerDrop                     // the next N replies of a server lost
	ServerPause                    // a server stopped for For
	ServerSlow                     // every command holds a server for Size
	LinkDelay                      // one client's replies from one server late by Size
	Partition                      // one client cut from Servers for For
	Restart                        // a server restarted with its data (Keep) or without
	Drift                          // a server's clock at Rate for For
	Jump                           // a server's clock moved by Size
	HolderPause                    // holders granted in [At, At+For) stop for For, ignoring their Context
	Promote                        // failover: a replica (Target) promoted
	ReplicaLag                     // failover: writes reach replica Target Size late for For
	ReplicaFreeze                  // failover: replica Target receives nothing for For
	numFaultKinds
)

var faultNames = [...]string{"server-delay", "server-drop", "server-pause", "server-slow", "link-delay", "partition",
	"restart", "drift", "jump", "holder-pause", "promote", "replica-lag", "replica-freeze"}

func (k FaultKind) String() string { return faultNames[k] }

// A Fault strikes at At (from the run's start) and heals after For.
type Fault struct {
	Kind    FaultKind
	At, For time.Duration
	Server  int   // the server (or replica, for the replica faults)
	Client  int   // LinkDelay, Partition
	Servers []int // Partition: the servers cut off
	Size    time.Duration
	N       int     // ServerDrop
	Keep    bool    // Restart
	Rate    float64 // Drift
	Beyond  bool    // outside what dlm promises
}

func (f Fault) String() string {
	s := fmt.Sprintf("%v@%v", f.Kind, f.At)
	switch f.Kind {
	case ServerDelay, ServerSlow:
		s += fmt.Sprintf(" s%d %v for %v", f.Server, f.Size, f.For)
	case ServerDrop:
		s += fmt.Sprintf(" s%d n=%d", f.Server, f.N)
	case ServerPause:
		s += fmt.Sprintf(" s%d for %v", f.Server, f.For)
	case LinkDelay:
		s += fmt.Sprintf(" c%d-s%d %v for %v", f.Client, f.Server, f.Size, f.For)
	case Partition:
		s += fmt.Sprintf(" c%d from %v for %v", f.Client, f.Servers, f.For)
	case Restart:
		s += fmt.Sprintf(" s%d keep=%v", f.Server, f.Keep)
	case Drift:
		s += fmt.Sprintf(" s%d rate=%.4f for %v", f.Server, f.Rate, f.For)
	case Jump:
		s += fmt.Sprintf(" s%d by %v", f.Server, f.Size)
	case HolderPause:
		s += fmt.Sprintf(" for %v", f.For)
	case Promote:
		s += fmt.Sprintf(" replica %d", f.Server)
	case ReplicaLag:
		s += fmt.Sprintf(" replica %d %v for %v", f.Server, f.Size, f.For)
	case ReplicaFreeze:
		s += fmt.Sprintf(" replica %d for %v", f.Server, f.For)
	}
	if f.Beyond {
		s += " (beyond the promise)"
	}
	return s
}

// A Schedule is a run's faults, in the order they strike.
type Schedule []Fault

func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = f.String()
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// Beyond reports whether a fault of s is outside what dlm promises, so that
// safety may break (liveness must still hold).
func (s Schedule) Beyond() bool {
	for _, f := range s {
		if f.Beyond {
			return true
		}
	}
	return false
}

// Bound is the fastest server clock rate dlm's drift margin covers for ttl:
// a key set for ttl on a clock running at rate r expires after ttl/r, and a
// lease is trusted for ttl·(1−DefaultDriftFactor) − 2ms.
func Bound(ttl time.Duration) float64 {
	return float64(ttl) / (float64(ttl)*(1-strategy.DefaultDriftFactor) - float64(2*time.Millisecond))
}

// Options restrict what Plan draws.
type Options struct {
	Deployment *Deployment // nil: drawn
	Guard      *bool       // nil: drawn
	Within     bool        // only faults within the promise
	Workers    int         // 0: drawn (1 or 2)
	Renew      *bool       // nil: drawn
	Kinds      []FaultKind // the kinds of fault drawn; nil: all
	LongHolds  bool        // every hold lasts 2 to 5 TTLs
	Prim       *Prim       // nil: drawn (a fair lock moves a Redlock run to single)
	Bug        Bug
}

// Plan draws a run's configuration and fault schedule from seed.
func Plan(seed uint64, o Options) (Config, Schedule) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	c := planConfig(r, seed, o)
	var s Schedule
	for range 1 + r.IntN(5) {
		f := drawFault(r, c, o.Kinds)
		if f.Beyond && o.Within {
			continue
		}
		s = append(s, f)
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].At < s[j].At })
	markPromotedClocks(s)
	if o.Within && s.Beyond() {
		s = slices.DeleteFunc(s, func(f Fault) bool { return f.Beyond })
	}
	return c, s
}

// planConfig draws the run's configuration from r (and its primitive from
// seed), then applies what o fixes.
func planConfig(r *rand.Rand, seed uint64, o Options) Config {
	c := Config{
		Deployment: Deployment(r.IntN(int(numDeployments))),
		Guard:      r.IntN(2) == 0,
		Clients:    2 + r.IntN(2),
		Workers:    1 + r.IntN(2),
		Renew:      r.IntN(3) > 0,
		TTL:        time.Second,
		Faulty:     12 * time.Second,
		Bug:        o.Bug,
	}
	if o.Deployment != nil {
		c.Deployment = *o.Deployment
	}
	if o.Guard != nil {
		c.Guard = *o.Guard
	}
	if o.Workers > 0 {
		c.Workers = o.Workers
	}
	c.LongHolds = o.LongHolds
	c.Prim = drawPrim(seed, c.Deployment)
	if o.Prim != nil {
		c.Prim = *o.Prim
		if c.Prim == Fair && (c.Deployment == Redlock3 || c.Deployment == Redlock5) {
			c.Deployment = Single
		}
	}
	if o.Renew != nil {
		c.Renew = *o.Renew
	}
	return c
}

// drawDur draws a duration uniformly in [lo, hi].
func drawDur(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// drawFault draws one fault for c from r, of one of kinds (nil: any), and
// marks it Beyond if it is outside what dlm promises.
func drawFault(r *rand.Rand, c Config, kinds []FaultKind) Fault {
	n := c.Deployment.servers()
	f := Fault{At: drawDur(r, 0, c.Faulty*3/4), For: drawDur(r, c.TTL/5, 3*c.TTL), Server: r.IntN(n), Client: r.IntN(c.Clients)}
	f.Kind = FaultKind(r.IntN(int(numFaultKinds)))
	if kinds != nil {
		f.Kind = kinds[r.IntN(len(kinds))]
	}
	if !c.Deployment.failover() && f.Kind >= Promote {
		f.Kind = HolderPause
	}
	if c.Deployment.failover() && f.Kind >= Promote {
		f.Server = r.IntN(2)
	}
	switch f.Kind {
	case ServerDelay, LinkDelay, ServerSlow:
		f.Size = drawDur(r, 0, 150*time.Millisecond)
	case ServerDrop:
		f.N = 1 + r.IntN(5)
	case Partition:
		k := 1 + r.IntN(n)
		f.Servers = r.Perm(n)[:k]
		sort.Ints(f.Servers)
	case Restart:
		f.Keep = r.IntN(2) == 0
		// Without data and without the guard, a restarted server
		// forgets the locks it granted: not promised.
		f.Beyond = !f.Keep && !c.Guard
	case Drift:
		b := Bound(c.TTL)
		if r.IntN(3) == 0 {
			f.Rate = b + (0.2)*r.Float64() + 0.0005
			f.Beyond = true
		} else {
			f.Rate = 0.9 + (b-0.0005-0.9)*r.Float64()
		}
		f.For = drawDur(r, c.TTL, 6*c.TTL)
	case Jump:
		f.Size = drawDur(r, -2*c.TTL, 2*c.TTL)
		f.Beyond = f.Size > 0 // a jump forward frees keys early
	case ReplicaLag:
		f.Size = drawDur(r, 0, 200*time.Millisecond)
	case Promote:
		// Sentinel may promote any replica: only AckAll waits for
		// every replica to have the lock.
		f.Beyond = c.Deployment != FailoverAll
	}
	return f
}

// markPromotedClocks marks s's clock faults Beyond if s promotes a replica.
// A promoted replica expires keys by its own clock, at the absolute times
// the primary wrote (Redis 7 propagates expiries as PXAT): a primary clock
// that fell behind the replicas' (a jump back, a slow drift) shortens every
// lease at promotion. Not in the documented promise: see
// TestPromotedReplicaClockAhead.
func markPromotedClocks(s Schedule) {
	promoted := false
	for _, f := range s {
		promoted = promoted || f.Kind == Promote
	}
	if promoted {
		for i := range s {
			if s[i].Kind == Jump || s[i].Kind == Drift {
				s[i].Beyond = true
			}
		}
	}
}

// A Grant is one Lock (or permit, or hold) a worker held.
type Grant struct {
	Client, Worker int
	Fence          uint64
	Write          bool          // an rwlock writer's
	Start          time.Duration // when Lock returned
	End            time.Duration // when its Context ended
	Until          time.Duration // its validity when the Context ended
	Cause          error
	Stale          bool      // Lock returned after its validity ended
	fair           *fairWait // a fair Lock's queue calls
}

func (g *Grant) String() string {
	s := fmt.Sprintf("c%d/w%d fence %d", g.Client, g.Worker, g.Fence)
	if g.Write {
		s += " (writer)"
	}
	return s
}

// valid is when the lease stopped being trustworthy.
func (g *Grant) valid() time.Duration { return min(g.End, g.Until) }

// An acq is one successful Acquire or Handoff of a strategy.
type acq struct {
	start, done time.Duration
	key         string // the strategy's key
	fence       uint64
	client      int
}

// A Result is what a run saw.
type Result struct {
	Seed       uint64
	Config     Config
	Schedule   Schedule
	Grants     int
	Attempts   int      // the strategies' acquisitions, granted or not
	Violations []string // safety: overlaps, fences back, Contexts late
	Stale      []string // locks returned after their validity ended (not a violation)
	Liveness   string   // non-empty: no grant after the faults healed
}

// Failed reports whether the run broke a check it must keep: liveness
// always, safety unless the schedule went beyond the promise.
func (r *Result) Failed() bool {
	return r.Liveness != "" || (len(r.Violations) > 0 && !r.Schedule.Beyond())
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %v\n  schedule %v\n  %d grants, %d acquisitions", r.Seed, r.Config, r.Schedule, r.Grants, r.Attempts)
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... %d more", len(r.Violations)-10)
			break
		}
		fmt.Fprintf(&b, "\n  %s", v)
	}
	for _, s := range r.Stale {
		fmt.Fprintf(&b, "\n  %s", s)
	}
	if r.Liveness != "" {
		fmt.Fprintf(&b, "\n  liveness: %s", r.Liveness)
	}
	return b.String()
}

const key = "sim:key"

// Run runs seed's plan in a synctest bubble of its own and returns what it saw.
func Run(t *testing.T, seed uint64, o Options) *Result {
	c, s := Plan(seed, o)
	return RunPlan(t, seed, c, s)
}

// RunPlan runs the configuration and schedule given.
func RunPlan(t *testing.T, seed uint64, c Config, s Schedule) *Result {
	res := &Result{Seed: seed, Config: c, Schedule: s}
	synctest.Test(t, func(t *testing.T) { run(t, res, seed) })
	return res
}

type world struct {
	c       Config
	seed    uint64
	t0      time.Time
	servers []*dlmtest.Server
	nodes   [][]*dlmtest.Node // [client][server]
	mans    []*dlm.Manager
	prims   []prims

	mu       sync.Mutex
	grants   []*Grant
	acqs     []acq
	attempts int
	pauses   []Fault
	wg       sync.WaitGroup // grant watchers
}

func (w *world) now() time.Duration { return time.Since(w.t0) }

func run(t *testing.T, res *Result, seed uint64) {
	c := res.Config
	w := &world{c: c, seed: seed, t0: time.Now()}
	w.deploy()
	defer func() {
		for _, srv := range w.servers {
			srv.Close()
		}
	}()
	shared := newPlantState()
	for i := range c.Clients {
		w.addClient(t, i, shared)
	}
	w.runFaulty(res.Schedule)
	w.checkLiveness(res)
	w.settle()
	w.check(res)
}

// deploy starts the Deployment's servers, each with 2 replicas for failover.
func (w *world) deploy() {
	for i := range w.c.Deployment.servers() {
		var opts []dlmtest.Option
		opts = append(opts, dlmtest.WithName(fmt.Sprintf("s%d", i)))
		if w.c.Deployment.failover() {
			opts = append(opts, dlmtest.WithReplicas(2))
		}
		w.servers = append(w.servers, dlmtest.NewServer(opts...))
	}
}

// addClient builds client i: its own Nodes of the servers (with the planted
// bug, if any), its strategy wrapped to record acquisitions, its Manager
// and the primitives its workers take.
func (w *world) addClient(t *testing.T, i int, shared *plantState) {
	c := w.c
	var nodes []*dlmtest.Node
	var dn []driver.Node
	for j, srv := range w.servers {
		nd := srv.Node()
		nd.SetDelay(linkDelay(w.seed, i, j))
		nodes = append(nodes, nd)
		dn = append(dn, plantNode(c.Bug, nd, srv, i, j, shared))
	}
	w.nodes = append(w.nodes, nodes)
	inner, err := newStrategy(c, dn)
	if err != nil {
		t.Fatalf("strategy: %v", err)
	}
	st := plantStrategy(c.Bug, inner, c.TTL, shared)
	opts := []dlm.Option{dlm.WithTTL(c.TTL), dlm.WithRetryDelay(5*time.Millisecond, c.TTL/4)}
	if c.Renew {
		opts = append(opts, dlm.WithAutoRenew(1.0/3, 20*c.TTL))
	}
	m, err := dlm.New(w.recording(i, inner, st), opts...)
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	ps, err := newPrims(c.Prim, m)
	if err != nil {
		t.Fatalf("%v: %v", c.Prim, err)
	}
	w.mans = append(w.mans, m)
	w.prims = append(w.prims, ps)
}

// recording wraps client i's strategy st (over inner, before any planted
// bug) to record its acquisitions, its handoffs if it hands off, and a fair
// lock's queue calls.
func (w *world) recording(i int, inner, st driver.Strategy) driver.Strategy {
	rec := &recorder{Strategy: st, w: w, client: i}
	var ds driver.Strategy = rec
	if h, ok := st.(driver.Handoff); ok {
		ds = &handoffRecorder{recorder: rec, h: h}
		if one, ok := inner.(mgr.OneDeployment); ok && w.c.Prim == Fair {
			ds = &fairRecorder{handoffRecorder: ds.(*handoffRecorder), node: &queueSpy{Node: one.Node(), w: w}}
		}
	}
	return ds
}

// runFaulty strikes the schedule's faults while the workers take the lock,
// until the faults heal, then heals whatever is still on.
func (w *world) runFaulty(s Schedule) {
	var fwg sync.WaitGroup
	for _, f := range s {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			time.Sleep(f.At)
			w.strike(f)
		}()
	}
	stop := w.t0.Add(w.c.Faulty)
	var wwg sync.WaitGroup
	for i := range w.c.Clients {
		for k := range w.c.Workers {
			wwg.Add(1)
			r := rand.New(rand.NewPCG(w.seed, uint64(i*16+k+1)))
			go func() {
				defer wwg.Done()
				w.work(i, k, r, stop)
			}()
		}
	}
	fwg.Wait()
	wwg.Wait()
	w.heal()
}

// checkLiveness checks that, once everything healed, the lock is granted
// again, and records in res if it is not.
func (w *world) checkLiveness(res *Result) {
	c := w.c
	limit := 10 * c.TTL
	if c.Guard {
		limit += 2*c.TTL + time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	h, g, err := w.take(ctx, 0, c.Prim == RWLock) // a writer: the gate and every permit
	cancel()
	if err != nil {
		res.Liveness = fmt.Sprintf("no grant within %v after the faults healed: %v", limit, err)
	} else {
		g.Worker = -1
		w.watch(h, g)
		w.unlock(h)
	}
}

// settle waits out the strategies' background work and the grant watchers.
func (w *world) settle() {
	time.Sleep(time.Minute) // background work of the strategies ends
	if (w.c.Prim == Semaphore || w.c.Prim == RWLock) && !w.c.Guard {
		// The permits' record (semaphore.CheckPermits) is a lock held for a
		// day without the guard, and Redlock settles a node whose answer
		// to its acquisition never came until the lock's lease ends. (A
		// day of timers costs little: nothing else runs.)
		time.Sleep(25 * time.Hour)
	}
	w.wg.Wait()
}

// linkDelay is the round trip of client's link to server: 100µs to 2ms.
// Without one, calls would take no virtual time, and Managers that wake
// each other (a failed Redlock acquisition undoes its minority of grants,
// whose release notifications wake the other Manager's waiter, whose
// attempt fails likewise...) would loop at one virtual instant forever.
func linkDelay(seed uint64, client, server int) time.Duration {
	r := rand.New(rand.NewPCG(seed, uint64(1000+client*64+server)))
	return 100*time.Microsecond + time.Duration(r.Int64N(int64(1900*time.Microsecond)))
}

func newStrategy(c Config, nodes []driver.Node) (driver.Strategy, error) {
	var opts []strategy.Option
	if c.Guard {
		opts = append(opts, strategy.WithMaxTTL(c.TTL))
	}
	if c.Bug != None {
		opts = append(opts, strategy.WithCoalescing(false)) // the bugs' wrappers read single calls
	}
	switch c.Deployment {
	case Single:
		return strategy.NewSingle(nodes[0], opts...)
	case Redlock3, Redlock5:
		return strategy.NewRedlock(nodes, opts...)
	case FailoverAll:
		opts = append(opts, strategy.WithAcks(strategy.AckAll()))
	case FailoverMajority:
		opts = append(opts, strategy.WithAcks(strategy.AckMajority()))
	case FailoverNone:
		opts = append(opts, strategy.WithAcks(strategy.AckNone()))
	}
	return strategy.NewFailover(nodes[0], append(opts, strategy.WithReplicas(2))...)
}

// work takes the lock again and again until stop.
func (w *world) work(client, worker int, r *rand.Rand, stop time.Time) {
	for time.Now().Before(stop) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*w.c.TTL)
		l, g, err := w.take(ctx, client, w.drawWrite(r))
		cancel()
		if err != nil {
			if !errors.Is(err, dlm.ErrNotAcquired) || dlm.Permanent(err) {
				time.Sleep(w.c.TTL / 10)
			}
			continue
		}
		start := time.Now()
		g.Worker = worker
		w.watch(l, g)
		var hold time.Duration
		switch r.IntN(4) {
		case 0:
			hold = 0
		case 1, 2:
			hold = time.Duration(r.Int64N(int64(w.c.TTL / 2)))
		default:
			hold = time.Duration(r.Int64N(int64(3 * w.c.TTL))) // renewed, when the client renews
		}
		if w.c.LongHolds {
			hold = 2*w.c.TTL + time.Duration(r.Int64N(int64(3*w.c.TTL)))
		}
		select {
		case <-time.After(hold):
		case <-l.Context().Done():
		}
		// A holder paused: it stops for a while whatever its Context says,
		// then unlocks (a hand-off, when a worker of its Manager waits).
		if p := w.pausing(start); p > 0 {
			time.Sleep(p)
		}
		w.unlock(l)
		if r.IntN(3) == 0 {
			time.Sleep(time.Duration(r.Int64N(int64(w.c.TTL / 4))))
		}
	}
}

// unlock unlocks l, bounded: a strategy without a timeout of its own
// (single, failover) waits for a lost reply as long as its context lets it.
func (w *world) unlock(l holding) {
	ctx, cancel := context.WithTimeout(context.Background(), w.c.TTL)
	defer cancel()
	_ = l.Unlock(ctx)
}

// pausing returns how long a holder granted at start stops.
func (w *world) pausing(start time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := start.Sub(w.t0)
	for _, f := range w.pauses {
		if at >= f.At && at < f.At+f.For {
			return f.For
		}
	}
	return 0
}

// watch records l's grant g and, in the background, the end of its Context.
func (w *world) watch(l holding, g *Grant) {
	g.Fence, g.Start = l.Fence(), w.now()
	if debugGrants {
		println("grant", g.Start.String(), g.Client, g.Worker, g.Fence, g.Write)
	}
	w.mu.Lock()
	w.grants = append(w.grants, g)
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		<-l.Context().Done()
		end, until := w.now(), l.Until().Sub(w.t0)
		w.mu.Lock()
		g.End, g.Until, g.Cause = end, until, context.Cause(l.Context())
		w.mu.Unlock()
	}()
}

func (w *world) strike(f Fault) {
	srv := w.servers[f.Server%len(w.servers)]
	switch f.Kind {
	case ServerDelay:
		srv.SetDelay(f.Size)
		time.Sleep(f.For)
		srv.SetDelay(0)
	case ServerDrop:
		srv.DropReplies(f.N)
	case ServerPause:
		srv.Pause()
		time.Sleep(f.For)
		srv.Resume()
	case ServerSlow:
		srv.SetSlow(f.Size)
		time.Sleep(f.For)
		srv.SetSlow(0)
	case LinkDelay:
		nd := w.nodes[f.Client][f.Server]
		base := linkDelay(w.seed, f.Client, f.Server)
		nd.SetDelay(base + f.Size)
		time.Sleep(f.For)
		nd.SetDelay(base)
	case Partition:
		for _, j := range f.Servers {
			w.nodes[f.Client][j].Partition(true)
		}
		time.Sleep(f.For)
		for _, j := range f.Servers {
			w.nodes[f.Client][j].Partition(false)
		}
	case Restart:
		srv.Restart(f.Keep)
	case Drift:
		srv.Clock().SetRate(f.Rate)
		time.Sleep(f.For)
		srv.Clock().SetRate(1)
	case Jump:
		srv.Clock().Jump(f.Size)
	case HolderPause:
		w.mu.Lock()
		w.pauses = append(w.pauses, f)
		w.mu.Unlock()
	case Promote:
		srv = w.servers[0]
		srv.Promote(srv.Replicas()[f.Server])
	case ReplicaLag:
		r := w.servers[0].Replicas()[f.Server]
		r.SetLag(f.Size)
		time.Sleep(f.For)
		r.SetLag(0)
	case ReplicaFreeze:
		r := w.servers[0].Replicas()[f.Server]
		r.Freeze(true)
		time.Sleep(f.For)
		r.Freeze(false)
	}
}

// heal ends every fault still on: the others end by themselves, but a
// server's lost replies are the next N, and those not yet spent when the
// workers stop would swallow the liveness check's calls (seed 1078, plain:
// a drop of 5 at 8.96s not spent by 12s, and Single waits for a lost
// reply until its context ends).
func (w *world) heal() {
	for _, srv := range w.servers {
		srv.Clock().SetRate(1)
		srv.DropReplies(0)
	}
}

// check fills res with what the run broke.
func (w *world) check(res *Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gs := w.grants
	res.Grants, res.Attempts = len(gs), w.attempts
	sort.Slice(gs, func(i, j int) bool { return gs[i].Start < gs[j].Start })
	for _, a := range gs {
		if a.Until <= a.Start {
			// Its Context must have ended by then, or end at once (a
			// timer that fires at this instant may run after the return).
			a.Stale = true
			res.Stale = append(res.Stale, fmt.Sprintf("stale: %v: Lock returned at %v, after its validity %v had ended (%v)", a, a.Start, a.Until, a.Cause))
			if a.End > a.Start {
				res.Violations = append(res.Violations, fmt.Sprintf("context late: %v: returned at %v after its validity %v, its Context ended only at %v (%v)",
					a, a.Start, a.Until, a.End, a.Cause))
			}
			continue
		}
		if a.End > a.Until {
			res.Violations = append(res.Violations, fmt.Sprintf("context late: %v: Context ended at %v, after its validity %v (%v)",
				a, a.End, a.Until, a.Cause))
		}
	}
	w.checkFamily(res, gs)
	// Fences, per key: the strategies' acquisitions of the primitives' keys.
	as := w.acqs
	for _, b := range as {
		for _, a := range as {
			if a.key == b.key && a.done < b.start && a.fence >= b.fence {
				res.Violations = append(res.Violations, fmt.Sprintf("fence back: c%d's acquisition begun at %v got fence %d, not above fence %d granted to c%d at %v",
					b.client, b.start, b.fence, a.fence, a.client, a.done)+" ("+b.key+")")
				break
			}
		}
	}
}

// recorder records a client's successful acquisitions.
type recorder struct {
	driver.Strategy
	w      *world
	client int
}

func (r *recorder) note(start time.Duration, key string, l driver.Lease) {
	if key == semaphore.CountKey(semName) || key == semaphore.CountKey(rwName+":read") {
		return // every user holds the permits' record with one token (CheckPermits): one fence
	}
	r.w.mu.Lock()
	r.w.acqs = append(r.w.acqs, acq{start: start, done: r.w.now(), key: key, fence: l.Fence, client: r.client})
	r.w.mu.Unlock()
}

func (r *recorder) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	start := r.w.now()
	l, err := r.Strategy.Acquire(ctx, key, token, ttl)
	r.w.mu.Lock()
	r.w.attempts++
	r.w.mu.Unlock()
	if err == nil {
		r.note(start, key, l)
	}
	return l, err
}

type handoffRecorder struct {
	*recorder
	h driver.Handoff
}

func (r *handoffRecorder) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	start := r.w.now()
	l, err := r.h.Handoff(ctx, key, from, to, ttl)
	if err == nil {
		r.note(start, key, l)
	}
	return l, err
}

var debugGrants = os.Getenv("SIMDEBUG") != ""
