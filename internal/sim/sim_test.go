package sim

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"
)

var (
	seeds   = flag.Int("sim.seeds", 60, "how many fresh seeds TestSeeds runs")
	oneSeed = flag.Uint64("seed", 0, "run this seed only (TestSeeds)")
	trace   = flag.Bool("sim.trace", false, "log every run")
	figures = flag.Bool("sim.figures", false, "measure the drift and clock-jump figures (TestFigures)")
)

// TestSeeds runs fresh seeds (or -seed S) and fails on any check a run
// within the promise broke, or on a lock never granted again.
func TestSeeds(t *testing.T) {
	list := []uint64{*oneSeed}
	if *oneSeed == 0 {
		base := rand.Uint64()
		list = list[:0]
		for i := range *seeds {
			list = append(list, base+uint64(i))
		}
	}
	start := time.Now()
	var beyond, broke int
	for _, s := range list {
		t0 := time.Now()
		if *trace {
			c, sc := Plan(s, Options{})
			t.Logf("seed %d: %v %v", s, c, sc)
		}
		r := Run(t, s, Options{})
		if *trace {
			t.Logf("%v: %v", time.Since(t0), r)
		}
		if r.Schedule.Beyond() {
			beyond++
			if len(r.Violations) > 0 {
				broke++
			}
		}
		if r.Failed() {
			t.Errorf("%v\n  run it again: go test ./internal/sim/ -run TestSeeds -seed %d -v", r, s)
		} else if testing.Verbose() && *oneSeed != 0 {
			t.Logf("%v", r)
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds in %v (%.0f/minute); %d beyond the promise, %d of them broke safety as allowed",
		len(list), el.Round(time.Millisecond), float64(len(list))/el.Minutes(), beyond, broke)
}

// TestPlanted shows the simulator finds each planted bug within a bounded
// number of seeds (within the promise: every fault the bug's absence
// survives), and that the same seeds pass without the bug.
func TestPlanted(t *testing.T) {
	single, r3, r5 := Single, Redlock3, Redlock5
	on, off := true, false
	cases := []struct {
		bug   Bug
		o     Options
		limit int
		skip  string
	}{
		{NoDrift, Options{Deployment: &single, Guard: &off, Renew: &off, Kinds: []FaultKind{Drift, HolderPause, Partition}}, 300, ""},
		{OneNodeFence, Options{Deployment: &r5, Guard: &off, Kinds: []FaultKind{Partition, ServerPause, LinkDelay, ServerDelay}}, 300,
			"not found in 300 seeds yet: the first node to answer is mostly the same low-latency node, whose counter rarely lags"},
		{RenewIgnoresRefusal, Options{Deployment: &single, Guard: &on, Renew: &on, LongHolds: true, Kinds: []FaultKind{Restart}}, 300,
			"not found in 300 seeds yet: the rewritten refusal is seen, the overlap that should follow is not; not diagnosed"},
		{HandoffNoCheck, Options{Deployment: &r3, Guard: &off, Workers: 2, Kinds: []FaultKind{HolderPause, Partition}}, 300,
			"not found in 300 seeds yet: a Manager that sees other processes contend stops handing over, so a stale holder's hand-off is rare"},
		{GuardVotesAtOnce, Options{Deployment: &single, Guard: &on, Kinds: []FaultKind{Restart, HolderPause}}, 300, ""},
	}
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
