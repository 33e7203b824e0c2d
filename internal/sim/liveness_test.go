package sim

import (
	"testing"
	"time"
)

// TestContention: 8 processes (Managers, each with its own Nodes) take one
// key over Redlock of 5 nodes, holding it 1ms, for 20s of virtual time,
// while 3 of the nodes delay each request by 0–150ms (drawn per message)
// or by a fixed 100ms, or (replies) each reply and published message by
// 0–150ms. Before the back-off on contended keys (queue.go) the 0–150ms
// requests case gave 9–12 grants (seeds 1–4; fixed 100ms: 112–174): each
// failed attempt's undo announced a release that woke every other
// process, whose attempts overlapped and split the votes again; with it,
// 59–87 (means of the four seeds 69–75 over several runs: the aim
// of 66 is met on average, not by much). The bounds (55 on average, 45
// per seed) leave room for the count's variation from run to run:
// goroutines that run at one virtual instant do so in the Go scheduler's
// order.
func TestContention(t *testing.T) {
	seeds := uint64(4)
	if raceOn {
		seeds = 3
	}
	for _, d := range []struct {
		name       string
		delay      Contention
		mean, each int
	}{
		{"uniform 0-150ms", Contention{Delay: Uniform(150 * time.Millisecond)}, 55, 45},
		{"fixed 100ms", Contention{Delay: Fixed(100 * time.Millisecond)}, 100, 80},
		{"replies 0-150ms", Contention{Delay: Uniform(150 * time.Millisecond), Replies: true}, 100, 80},
	} {
		t.Run(d.name, func(t *testing.T) {
			all := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				c := d.delay
				c.Clients, c.Servers, c.Slow, c.Hold, c.For = 8, 5, 3, time.Millisecond, 20*time.Second
				r := RunContention(t, seed, c)
				t.Logf("seed %d: %v", seed, r)
				all += r.Grants
				if r.Grants < d.each {
					t.Errorf("seed %d: %d grants in %v, want at least %d", seed, r.Grants, c.For, d.each)
				}
				if r.Late > 0 || r.Overlaps > 0 {
					t.Errorf("seed %d: %d grants late, %d overlapping", seed, r.Late, r.Overlaps)
				}
			}
			if mean := all / int(seeds); mean < d.mean {
				t.Errorf("%d grants on average in 20s, want at least %d", mean, d.mean)
			}
		})
	}
}
