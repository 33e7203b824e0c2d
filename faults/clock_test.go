package faults

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the clock nemeses promise, as docs/guarantees.md says: a server
// clock that gets ahead by more than the drift margin frees a lock early,
// on Redlock too (one master of a bare quorum is enough), so exclusion holds
// only while every clock keeps within the margin; fences hold everywhere (their counters have no TTL), and a
// write accepted after a larger fence was granted breaks them only where
// exclusion is promised too.
func TestClockPromises(t *testing.T) {
	for _, c := range []struct {
		strategy, nemesis string
		exclusion         bool
	}{
		{"single", "clock-jump", false},
		{"single-guard", "clock-jump", false},
		{"failover-ack-all", "clock-jump", false},
		{"cluster", "clock-jump", false},
		{"redlock", "clock-jump", false},
		{"redlock-guard", "clock-jump", false},
		{"redlock", "clock-drift", false},
		{"single", "clock-drift-within", true},
		{"redlock", "clock-drift-within", true},
		{"single", "clock-drift-beyond", false},
		{"redlock", "clock-drift-beyond", false},
		{"redlock", "clock-drift-beyond+pause-holder", false},
		{"redlock", "clock-drift+pause-holder", false},
	} {
		p := promise(c.strategy, c.nemesis)
		if p.Exclusion != c.exclusion || !p.Fences || p.Exclusion == (p.Why != "") {
			t.Errorf("%s × %s: promise %+v, want exclusion %v, fences, and a reason only without exclusion", c.strategy, c.nemesis, p, c.exclusion)
		}
	}
	if Applies("single", "clock-drift") || !Applies("redlock-guard", "clock-drift") {
		t.Error("clock-drift (a minority's clocks) applies to Redlock only")
	}
	if n := findNemesis("clock-drift-within+pause-holder"); n == nil || !n.clocked {
		t.Error("a combined nemesis lost its part's clocks")
	}

	fencesOnly := Cell{Strategy: "single", Nemesis: "clock-jump"}.promise()
	overlap := Counts{Overlaps: 3, LostWrites: 2, SavedWrites: 4, Linearizable: "Ok"}
	if !keeps(fencesOnly, overlap) {
		t.Errorf("overlapping holders' writes broke a fences-only promise: %+v", overlap)
	}
	if keeps(Cell{Strategy: "redlock", Nemesis: "clock-drift-within"}.promise(), overlap) {
		t.Errorf("overlaps kept Redlock's promise under clocks within the drift margin: %+v", overlap)
	}
	back := Counts{Overlaps: 3, FenceRegressions: 1, Linearizable: "Ok"}
	if keeps(fencesOnly, back) {
		t.Errorf("a fence that went back kept a fences-only promise: %+v", back)
	}
	r := Result{Cell: Cell{Strategy: "single", Nemesis: "clock-jump"}, Promise: fencesOnly, Kept: true}
	if p, v := promiseAndVerdict(r); p != "fences only: "+fencesOnly.Why || v != "expected" {
		t.Errorf("table: %q, %q", p, v)
	}
}

// The clock nemeses move the server's own wall clock, through the shim in
// its network namespace: after clock-jump a key whose TTL the jump passed
// is gone and TIME is two TTLs ahead; under clock-drift-beyond the clock
// gains on real time until healed.
func TestClockNemeses(t *testing.T) {
	t.Parallel()
	needRoot(t)
	n, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const ttl = time.Second
	topo, err := startTopology(n, t.TempDir(), "single", false, false, true, ttl)
	if topo != nil {
		defer topo.stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cell: Cell{TTL: ttl}, net: n, topo: topo}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: topo.Data[0].addr(), MaxRetries: -1})
	defer c.Close()
	// ahead bounds how far the server's clock is ahead of this one's: at
	// least lo, at most hi. A loaded machine can stretch a TIME call's
	// round trip, which widens the bounds: of up to 20 calls it keeps the
	// narrowest, and stops at one narrower than 10ms.
	ahead := func() (lo, hi time.Duration) {
		for i := 0; i < 20; i++ {
			before := time.Now()
			tm, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			l, h := time.Until(tm), tm.Sub(before)
			if i == 0 || h-l < hi-lo {
				lo, hi = l, h
			}
			if hi-lo < 10*time.Millisecond {
				break
			}
		}
		return lo, hi
	}
	if lo, hi := ahead(); lo > ttl/10 || hi < -ttl/10 {
		t.Fatalf("the server's clock starts %v to %v ahead, want about real time", lo, hi)
	}

	if err := c.Set(ctx, "k", "v", 3*ttl/2).Err(); err != nil {
		t.Fatal(err)
	}
	desc, heal, err := findNemesis("clock-jump").fault(r)
	if err != nil || heal == nil {
		t.Fatalf("clock-jump: %q, %v", desc, err)
	}
	heal()
	if lo, _ := ahead(); lo < 2*ttl-ttl/10 {
		t.Errorf("after %q the server's clock is %v ahead, want two TTLs", desc, lo)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("after %q a key of 1.5 TTLs is still there: EXISTS = %d, %v", desc, n, err)
	}

	start, _ := ahead()
	desc, heal, err = findNemesis("clock-drift-beyond").fault(r)
	if err != nil || heal == nil {
		t.Fatalf("clock-drift-beyond: %q, %v", desc, err)
	}
	gained := until(10*time.Second, func() bool { lo, _ := ahead(); return lo > start+ttl/5 }) == nil
	heal()
	if !gained {
		t.Fatalf("under %q the server's clock did not gain %v on real time in 10s", desc, ttl/5)
	}
	// The server reads the clock the suite sets: its offset now, healed.
	lo, hi := ahead()
	if o := topo.Data[0].clock.Offset(); o < lo-time.Millisecond || o > hi+time.Millisecond {
		t.Errorf("healed, the server's clock is %v to %v ahead, its Clock says %v", lo, hi, o)
	}
}
