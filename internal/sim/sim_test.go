package sim

import (
	"flag"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	seeds   = flag.Int("sim.seeds", 0, "how many fresh seeds TestSeeds runs (default 60, 10 under -race)")
	oneSeed = flag.Uint64("seed", 0, "run this seed only (TestSeeds)")
	base    = flag.Uint64("sim.base", 0, "TestSeeds runs the seeds from this one on (0: a random base)")
	trace   = flag.Bool("sim.trace", false, "log every run")
	figures = flag.Bool("sim.figures", false, "measure the drift and clock-jump figures (TestFigures)")
	wide    = flag.Bool("sim.wide", false, "TestPlantedSeeds draws its runs as TestSeeds does")
	prim    = flag.String("sim.prim", "", "TestSeeds takes only this primitive: plain, fair, semaphore or rwlock (default: drawn)")
)

// seedOptions are TestSeeds' options, from -sim.prim.
func seedOptions(t *testing.T) Options {
	if *prim == "" {
		return Options{}
	}
	for p := range numPrims {
		if p.String() == *prim {
			return Options{Prim: &p}
		}
	}
	t.Fatalf("-sim.prim=%s: not a primitive", *prim)
	return Options{}
}

// lessGC lets the heap grow to 5 times the live data before a collection
// (GOGC=400) while t runs: runs allocate much and keep little, and the
// collector took about a sixth of their CPU at the default.
func lessGC(t *testing.T) {
	old := debug.SetGCPercent(400)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// TestSeeds runs fresh seeds (or -seed S) and fails on any check a run
// within the promise broke, or on a lock never granted again.
func TestSeeds(t *testing.T) {
	lessGC(t)
	list := []uint64{*oneSeed}
	if *oneSeed == 0 {
		n := *seeds
		if n == 0 {
			// About 8s of CPU (10,000 seeds took 240s on 2 cores).
			n = 300
			if raceOn {
				n = 10
			}
		}
		b := *base
		if b == 0 {
			b = rand.Uint64()
		}
		list = list[:0]
		for i := range n {
			list = append(list, b+uint64(i))
		}
	}
	o := seedOptions(t)
	start := time.Now()
	var mu sync.Mutex
	var beyond, broke, stale int
	// Seeds run in parallel (each in a bubble of its own), -test.parallel
	// at a time: GOMAXPROCS by default.
	t.Run("seeds", func(t *testing.T) {
		for _, s := range list {
			t.Run(strconv.FormatUint(s, 10), func(t *testing.T) {
				t.Parallel()
				t0 := time.Now()
				if *trace {
					c, sc := Plan(s, o)
					t.Logf("seed %d: %v %v", s, c, sc)
				}
				r := Run(t, s, o)
				if *trace {
					t.Logf("%v: %v", time.Since(t0), r)
				}
				mu.Lock()
				if len(r.Stale) > 0 {
					stale++
				}
				if r.Schedule.Beyond() {
					beyond++
					if len(r.Violations) > 0 {
						broke++
					}
				}
				mu.Unlock()
				if r.Failed() {
					t.Errorf("%v\n  run it again: go test ./internal/sim/ -run TestSeeds -seed %d -v", r, s)
				} else if testing.Verbose() && *oneSeed != 0 {
					t.Logf("%v", r)
				}
			})
		}
	})
	el := time.Since(start)
	t.Logf("%d seeds in %v (%.0f/minute); %d beyond the promise, %d of them broke safety as allowed; %d returned a lock whose validity had ended",
		len(list), el.Round(time.Millisecond), float64(len(list))/el.Minutes(), beyond, broke, stale)
}

// A plantedCase is a planted bug and the runs that look for it.
type plantedCase struct {
	bug   Bug
	o     Options
	limit int
	skip  string
	rule  string // the rule that must catch it, when it is one of the family's
}

func plantedCases() []plantedCase {
	single, r3, r5 := Single, Redlock3, Redlock5
	on, off := true, false
	plain, fair, sem, rw := Plain, Fair, Semaphore, RWLock
	return []plantedCase{
		{NoDrift, Options{Prim: &plain, Deployment: &single, Guard: &off, Renew: &off, Kinds: []FaultKind{Drift, HolderPause, Partition}}, 300, "", ""},
		{OneNodeFence, Options{Prim: &plain, Deployment: &r5, Guard: &off, Kinds: []FaultKind{Partition, ServerPause, LinkDelay, ServerDelay}}, 300, "", ""},
		{RenewIgnoresRefusal, Options{Prim: &plain, Deployment: &single, Guard: &on, Renew: &on, LongHolds: true, Kinds: []FaultKind{Restart}}, 300, "", ""},
		{HandoffNoCheck, Options{Prim: &plain, Deployment: &r3, Guard: &off, Workers: 2, Kinds: []FaultKind{HolderPause, Partition}}, 300, "", ""},
		{GuardVotesAtOnce, Options{Prim: &plain, Deployment: &single, Guard: &on, Kinds: []FaultKind{Restart, HolderPause}}, 300, "", ""},
		{FairJumpsQueue, Options{Deployment: &single, Prim: &fair, Guard: &off, Workers: 2, Kinds: []FaultKind{HolderPause, LinkDelay}}, 300, "", "fifo:"},
		{SemExtraPermit, Options{Deployment: &single, Prim: &sem, Guard: &off, Workers: 2, Kinds: []FaultKind{HolderPause, LinkDelay}}, 300, "", "permits:"},
		{WriterIgnoresReaders, Options{Deployment: &r3, Prim: &rw, Guard: &off, Workers: 2, Kinds: []FaultKind{HolderPause, LinkDelay}}, 300, "", "writer overlap:"},
	}
}

// TestPlanted shows the simulator finds each planted bug within a bounded
// number of seeds (within the promise: every fault the bug's absence
// survives), and that the same seeds pass without the bug.
func TestPlanted(t *testing.T) {
	lessGC(t)
	cases := plantedCases()
	base := rand.Uint64()
	for _, c := range cases {
		t.Run(c.bug.String(), func(t *testing.T) {
			if c.skip != "" && !*figures {
				t.Skip(c.skip)
			}
			c.o.Within = true
			for i := range c.limit {
				seed := base + uint64(i)
				c.o.Bug = c.bug
				r := Run(t, seed, c.o)
				if len(r.Violations) == 0 {
					continue
				}
				t.Logf("found after %d seeds: %v", i+1, r)
				if c.rule != "" && !slices.ContainsFunc(r.Violations, func(v string) bool { return strings.HasPrefix(v, c.rule) }) {
					t.Errorf("%v was not caught by the rule %q", c.bug, c.rule)
				}
				c.o.Bug = None
				if r := Run(t, seed, c.o); r.Failed() {
					t.Errorf("without the bug, the same seed fails: %v", r)
				}
				return
			}
			t.Errorf("%v not found in %d seeds from %d", c.bug, c.limit, base)
		})
	}
}

// TestFigures measures (with -sim.figures) the server clock rate at which
// single and Redlock leases start to overlap, against Bound, and what
// server clock jumps forward of given sizes do. Holders stop past their
// lease (no renewal) while the other clients wait, so every lease's end
// races the next grant.
func TestFigures(t *testing.T) {
	if !*figures {
		t.Skip("run with -sim.figures")
	}
	off, plain := false, Plain
	for _, d := range []Deployment{Single, Redlock3, Redlock5} {
		var first float64
		for i := 0; i <= 30; i++ {
			rate := 1 + float64(i)/1000
			overlaps, runs := 0, 6
			for s := range runs {
				c, _ := Plan(uint64(s), Options{Deployment: &d, Guard: &off, Renew: &off, Workers: 1, Prim: &plain})
				c.LongHolds = true
				var sc Schedule
				for j := range d.servers() {
					sc = append(sc, Fault{Kind: Drift, Server: j, Rate: rate, For: c.Faulty, Beyond: rate > Bound(c.TTL)})
				}
				if r := RunPlan(t, uint64(s), c, sc); len(r.Violations) > 0 {
					overlaps++
				}
			}
			if overlaps > 0 && first == 0 {
				first = rate
			}
			if testing.Verbose() {
				t.Logf("%v: server clocks at rate %.3f: %d of %d runs broke", d, rate, overlaps, runs)
			}
		}
		t.Logf("%v: first rate with an overlap %.3f; the drift margin covers up to %.4f (factor %v, TTL 1s)", d, first, Bound(time.Second), 0.01)
	}
	for _, d := range []Deployment{Single, Redlock3} {
		for _, j := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
			broke, runs := 0, 6
			for s := range runs {
				c, _ := Plan(uint64(s), Options{Deployment: &d, Guard: &off, Renew: &off, Workers: 1, Prim: &plain})
				c.LongHolds = true
				var sc Schedule
				for k := range 10 {
					for srv := range d.servers() {
						sc = append(sc, Fault{Kind: Jump, At: time.Duration(k+1) * c.Faulty / 12, Server: srv, Size: j, Beyond: true})
					}
				}
				if r := RunPlan(t, uint64(s), c, sc); len(r.Violations) > 0 {
					broke++
				}
			}
			t.Logf("%v: every server's clock jumped forward by %v ten times: %d of %d runs saw an overlap", d, j, broke, runs)
		}
	}
}

// TestPromotedReplicaClockAhead reproduces what soak seed
// 5032804244753940639 found (failover-all, guard on: the primary's clock
// jumped back 1.48s, a replica was promoted 2.5s later, and a lease was
// granted while another was valid for 108ms more): the promoted replica
// expires the lock at the absolute time the old primary wrote, by its own
// clock, which is ahead. Within the documented promise (AckAll, a clock
// jump back), but broken: the guarantees say nothing of clock offsets
// between a primary and its replicas.
func TestPromotedReplicaClockAhead(t *testing.T) {
	if !*figures {
		t.Skip("known gap (seed 5032804244753940639): under failover, a primary whose clock is behind its replicas' by more than the drift margin loses its locks early at promotion; run with -sim.figures to see it")
	}
	plain := Plain
	r := Run(t, 5032804244753940639, Options{Prim: &plain})
	t.Logf("%v", r)
	if len(r.Violations) > 0 {
		t.Errorf("leases overlapped after a promotion: the promoted replica's clock was ahead of the primary's")
	}
}

// TestSemaphoreWaitersWakeEachOther reproduces what seed 1018 with a
// semaphore found (Redlock of 5, 3 clients of 2 workers, 2 permits): from
// about 5s on, the waiters of two clients try a permit about every round
// trip (2,000 to 4,600 acquisitions a virtual second; 25,000 for 43
// grants, where other semaphore runs make about 9 a grant). Each attempt
// fails, its late or minority grants are released, and those releases on
// distinct masters add up, within the coalescer's window, to the quorum
// that wakes every waiter's release watch (semaphore.Acquire then tries at
// once). Safety and liveness hold; the CPU and the servers' load do not.
func TestSemaphoreWaitersWakeEachOther(t *testing.T) {
	if !*figures {
		t.Skip("known gap (seed 1018, semaphore over Redlock 5): waiters wake each other through their failed attempts' releases; run with -sim.figures to see it")
	}
	sem := Semaphore
	r := Run(t, 1018, Options{Prim: &sem})
	t.Logf("%v", r)
	if r.Attempts > 100*r.Grants {
		t.Errorf("%d acquisitions for %d grants: the waiters spin", r.Attempts, r.Grants)
	}
}

// TestPlantedSeeds measures (with -sim.figures) how many seeds the
// simulator takes to find each planted bug, from 20 random bases (5 with
// -sim.wide): the fewest, the median and the most. With -sim.wide the
// runs are drawn as TestSeeds draws them (any deployment, primitive and
// fault, within the promise) rather than narrowed to where the bug shows.
func TestPlantedSeeds(t *testing.T) {
	if !*figures {
		t.Skip("run with -sim.figures")
	}
	lessGC(t)
	searches := 20
	if *wide {
		searches = 5
	}
	for _, c := range plantedCases() {
		if *wide {
			c.o = Options{}
		}
		c.o.Within, c.o.Bug = true, c.bug
		var took []int
		for range searches {
			base := rand.Uint64()
			n := 0
			for i := range 10000 {
				if r := Run(t, base+uint64(i), c.o); len(r.Violations) > 0 {
					n = i + 1
					break
				}
			}
			if n == 0 {
				t.Errorf("%v survived 10,000 seeds from %d", c.bug, base)
				n = 10001
			}
			took = append(took, n)
		}
		slices.Sort(took)
		t.Logf("%v: found after %d, %d, %d seeds (fewest, median, most of %d searches): %v", c.bug, took[0], took[len(took)/2], took[len(took)-1], searches, took)
	}
}
