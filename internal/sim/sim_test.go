package sim

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"
)

var (
	seeds   = flag.Int("sim.seeds", 150, "how many fresh seeds TestSeeds runs")
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
