package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/fairlock"
	"github.com/dlmgo/dlm/rwlock"
	"github.com/dlmgo/dlm/semaphore"
)

// A Prim is what the workers take: the plain lock or one of the lock
// family's primitives, over the run's strategy.
type Prim int

const (
	Plain     Prim = iota // dlm.Manager.Lock on one key
	Fair                  // fairlock (single and failover only)
	Semaphore             // semaphore of Permits permits
	RWLock                // rwlock of at most Permits readers; a third of the takes write
	numPrims
)

func (p Prim) String() string { return [...]string{"plain", "fair", "semaphore", "rwlock"}[p] }

// Permits is the number of permits of the Semaphore runs and of readers of
// the RWLock runs.
const Permits = 2

const (
	semName = "sim:sem"
	rwName  = "sim:rw"
)

// drawPrim draws a run's primitive, from a stream of its own so that the
// rest of a seed's plan is what it was before the family joined: half the
// runs take the plain lock.
func drawPrim(seed uint64, d Deployment) Prim {
	r := rand.New(rand.NewPCG(seed, 0xfa111))
	p := [...]Prim{Plain, Plain, Plain, Fair, Semaphore, RWLock}[r.IntN(6)]
	if p == Fair && (d == Redlock3 || d == Redlock5) {
		p = Plain // fairlock refuses Redlock
	}
	return p
}

// A holding is what a worker holds: a *dlm.Lock (plain, fair, a permit) or
// an *rwlock.Hold.
type holding interface {
	Context() context.Context
	Until() time.Time
	Fence() uint64
	Unlock(ctx context.Context) error
}

// A prims is one client's primitive.
type prims struct {
	m    *dlm.Manager
	fair *fairlock.FairLock
	sem  *semaphore.Semaphore
	rw   *rwlock.RWLock
}

func newPrims(p Prim, m *dlm.Manager) (prims, error) {
	ps := prims{m: m}
	var err error
	switch p {
	case Fair:
		ps.fair, err = fairlock.New(m, key)
	case Semaphore:
		ps.sem, err = semaphore.New(m, semName, Permits)
	case RWLock:
		ps.rw, err = rwlock.New(m, rwName, Permits)
	}
	return ps, err
}

// writerKey marks the context of a writer's Lock (for a planted bug).
type writerKey struct{}

// fairKey carries a fair waiter's *fairWait to the queue spy.
type fairKey struct{}

// take takes the client's primitive once; write is drawn (rwlock) or false.
func (w *world) take(ctx context.Context, client int, write bool) (holding, *Grant, error) {
	ps := w.prims[client]
	g := &Grant{Client: client}
	var h holding
	var err error
	switch w.c.Prim {
	case Plain:
		h, err = ps.m.Lock(ctx, key)
	case Fair:
		fw := &fairWait{}
		g.fair = fw
		h, err = ps.fair.Lock(context.WithValue(ctx, fairKey{}, fw))
	case Semaphore:
		h, err = ps.sem.Acquire(ctx)
	case RWLock:
		g.Write = write
		if write {
			h, err = ps.rw.Lock(context.WithValue(ctx, writerKey{}, true))
		} else {
			h, err = ps.rw.RLock(ctx)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return h, g, nil
}

// drawWrite draws whether a take of an rwlock run writes (a third do).
func (w *world) drawWrite(r *rand.Rand) bool {
	return w.c.Prim == RWLock && r.IntN(3) == 0
}

// A fairWait is what one fair Lock call learnt from the queue script.
type fairWait struct {
	mu    sync.Mutex
	calls []queueCall
}

// A queueCall is one call of the queue script that joined or kept a place.
type queueCall struct {
	start, end time.Duration
	arrival    uint64
}

// arrival is the waiter's arrival number at its last call.
func (f *fairWait) arrival() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return 0
	}
	return f.calls[len(f.calls)-1].arrival
}

// isQueue reports whether c is a fair lock's queue script joining or
// keeping a place (keys: queue, deadlines, arrivals; args: token, lease, op).
func isQueue(c *driver.Call) bool {
	return len(c.Keys) >= 3 && strings.HasSuffix(c.Keys[0], ":fair:queue") && len(c.Args) == 3 && c.Args[2] == "w"
}

// queueSpy is the node a fair run's strategy exposes (mgr.OneDeployment),
// through which fairlock runs its queue script: it records each waiter's
// arrival numbers, from the waiter's context.
type queueSpy struct {
	driver.Node
	w *world
}

func (q *queueSpy) Run(ctx context.Context, calls []driver.Call) {
	start := q.w.now()
	q.Node.Run(ctx, calls)
	fw, _ := ctx.Value(fairKey{}).(*fairWait)
	if fw == nil {
		return
	}
	end := q.w.now()
	for i := range calls {
		c := &calls[i]
		if c.Err == nil && isQueue(c) && len(c.Reply) == 3 {
			fw.mu.Lock()
			fw.calls = append(fw.calls, queueCall{start: start, end: end, arrival: uint64(c.Reply[1])})
			fw.mu.Unlock()
		}
	}
}

// fairRecorder is a handoffRecorder that keeps its locks on one deployment,
// as fairlock requires.
type fairRecorder struct {
	*handoffRecorder
	node driver.Node
}

func (f *fairRecorder) Node() driver.Node { return f.node }

// fifoChecked reports whether a run's schedule lets the fair lock promise
// arrival order: nothing loses the queue (a restart without data, a
// promotion) and nothing beyond the promise.
func fifoChecked(s Schedule) bool {
	for _, f := range s {
		if f.Beyond || f.Kind == Promote || f.Kind == Restart && !f.Keep {
			return false
		}
	}
	return true
}

// checkFamily adds the primitives' rules to res; gs are sorted by Start.
func (w *world) checkFamily(res *Result, gs []*Grant) {
	switch w.c.Prim {
	case Plain, Fair:
		w.checkExclusive(res, gs, func(a, b *Grant) bool { return true }, "overlap")
		if w.c.Prim == Fair && fifoChecked(res.Schedule) {
			w.checkFIFO(res, gs)
		}
	case Semaphore:
		checkCount(res, gs, func(*Grant) bool { return true }, Permits, "permits")
	case RWLock:
		w.checkExclusive(res, gs, func(a, b *Grant) bool { return a.Write || b.Write }, "writer overlap")
		checkCount(res, gs, func(g *Grant) bool { return !g.Write }, Permits, "readers")
	}
}

// checkExclusive reports pairs of valid grants that overlap in true time
// and that excl says exclude each other.
func (w *world) checkExclusive(res *Result, gs []*Grant, excl func(a, b *Grant) bool, rule string) {
	for i, a := range gs {
		for _, b := range gs[i+1:] {
			// A lock returned after its validity (Stale) was valid at no
			// time after its return.
			if b.Start >= a.valid() || b.valid() <= b.Start || !excl(a, b) {
				continue
			}
			res.Violations = append(res.Violations, fmt.Sprintf("%s: %v granted at %v while %v was valid [%v, %v)",
				rule, b, b.Start, a, a.Start, a.valid()))
		}
	}
}

// checkCount reports the instants at which more than n grants that count
// were valid at once.
func checkCount(res *Result, gs []*Grant, counts func(*Grant) bool, n int, rule string) {
	type event struct {
		at   time.Duration
		d    int
		g    *Grant
		open bool
	}
	var es []event
	for _, g := range gs {
		if counts(g) && g.valid() > g.Start {
			es = append(es, event{g.Start, 1, g, true}, event{g.valid(), -1, g, false})
		}
	}
	// Ends before starts at one instant: validity is [Start, valid()).
	sort.SliceStable(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].d < es[j].d })
	held := map[*Grant]bool{}
	for _, e := range es {
		if !e.open {
			delete(held, e.g)
			continue
		}
		held[e.g] = true
		if len(held) > n {
			var who []string
			for g := range held {
				who = append(who, g.String())
			}
			sort.Strings(who)
			res.Violations = append(res.Violations, fmt.Sprintf("%s: %d valid at %v, more than %d: %s", rule, len(held), e.at, n, strings.Join(who, ", ")))
		}
	}
}

// checkFIFO reports a fair grant made while a waiter that arrived before
// it still held its place: a waiter A whose arrival number is below B's,
// granted after B, that at B's grant had a reply to a queue call with that
// same number (so it held that place throughout) sent less than half a
// TTL before (so its place had not lapsed: a place lasts a TTL, by server
// clocks within the drift bound).
func (w *world) checkFIFO(res *Result, gs []*Grant) {
	for _, b := range gs {
		if b.fair == nil {
			continue
		}
		bn := b.fair.arrival()
		for _, a := range gs {
			if a.fair == nil || a == b || a.Start <= b.Start {
				continue
			}
			an := a.fair.arrival()
			if an == 0 || an >= bn {
				continue
			}
			a.fair.mu.Lock()
			placed := false
			for _, q := range a.fair.calls {
				if q.arrival == an && q.end <= b.Start && b.Start < q.start+w.c.TTL/2 {
					placed = true
				}
			}
			a.fair.mu.Unlock()
			if placed {
				res.Violations = append(res.Violations, fmt.Sprintf("fifo: %v (arrival %d) granted at %v while %v (arrival %d, granted at %v) waited in its place",
					b, bn, b.Start, a, an, a.Start))
			}
		}
	}
}
