package faults

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MainIfClient()
	os.Exit(m.Run())
}

// needRoot skips a test that needs network namespaces when this is not
// root, unless DLM_REQUIRE_REDIS is set (in CI), where it fails.
func needRoot(t *testing.T) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"redis-server", "redis-sentinel", "ip", "nsenter", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "network namespaces need root"
	case len(missing) > 0:
		why = "missing " + strings.Join(missing, ", ")
	default:
		return
	}
	if os.Getenv("DLM_REQUIRE_REDIS") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// shortCell is a cell of the short matrix: four client processes of two
// goroutines each, so that Unlocks hand the lock over under every fault.
// It runs 8s, and then, on a loaded machine, until the nemesis has struck,
// healed, and the clients have made 30 Lock calls (MinAttempts; at most 32s in
// all): at load 26 on 2 cores, with the matrix and another test's cell
// beside it, 7 of 17 cells saw no strike in 8s (the nemesis strikes a
// long hold, which it found none of).
func shortCell(strategy, nemesis string) Cell {
	return Cell{Strategy: strategy, Nemesis: nemesis, Clients: 4, Workers: 2, Duration: 8 * time.Second,
		MinAttempts: 30, TTL: time.Second, Hold: 10 * time.Millisecond, Wait: 2 * time.Second}
}

// primitiveCell is a short cell whose clients take a primitive of the lock
// family instead of the plain lock.
func primitiveCell(primitive, strategy, nemesis string) Cell {
	c := shortCell(strategy, nemesis)
	c.Primitive = primitive
	return c
}

// minGrants is the fewest grants a short cell must show for its verdict to
// mean something. It is an availability floor, not a figure: cells grant
// hundreds on an idle machine, but appendfsync always under the race
// detector on a loaded CI machine gave 49. The amnesia guard under
// kill-empty spends most of a short cell quarantined (about 2s after each
// of up to three restarts in 8s: 12 to 130 grants seen), so for it the
// floor says only that the guard lets locks through again.
func minGrants(c Cell) int {
	if strings.HasSuffix(c.Strategy, "-guard") {
		return 1
	}
	return 15
}

// The short matrix: a cell of each kind of fault, each of which must keep
// what the documentation promises. The full matrix is `go run
// ./faults/cmd/dlmfaults` (from the repository root).
func TestShortMatrix(t *testing.T) {
	t.Parallel()
	needRoot(t)
	cells := []Cell{
		shortCell("redlock", "stop-minority"),
		shortCell("redlock", "kill-fsync"),
		shortCell("redlock", "pause-holder"),
		shortCell("redlock", "partition-holder"),
		shortCell("redlock", "partition-majority"),
		shortCell("redlock", "lossy-majority"),
		shortCell("single", "pause-holder"),
		shortCell("single-guard", "kill-empty"),
		shortCell("failover-ack-all", "failover-lagging"),
		shortCell("cluster", "slot-migration"),
		shortCell("redlock", "stop-minority+pause-holder"),
		shortCell("redlock", "kill-fsync+partition-holder"),
		primitiveCell("fairlock", "single", "pause-holder"),
		primitiveCell("election", "single", "partition-holder"),
		primitiveCell("semaphore", "redlock", "pause-holder"),
		primitiveCell("rwlock", "single", "partition-holder"),
		primitiveCell("multilock", "cluster", "slot-migration"),
	}
	var log strings.Builder
	// Two cells at a time (each has a network of its own): a cell keeps
	// its promise on a busy machine, which is what it checks, and its grant
	// floor is set for a loaded one.
	results := Matrix(cells, t.TempDir(), "", &log, 2)
	t.Log("\n" + log.String())
	var plain, handedOff int // plain-lock cells, and those that saw a hand-off
	for _, r := range results {
		if r.Cell.Primitive == "" {
			plain++
			if r.Counts.Handoffs > 0 {
				handedOff++
			}
		}
		switch {
		case r.Err != "":
			t.Errorf("%s × %s: %s", r.Cell.Taken(), r.Cell.Nemesis, r.Err)
		case !r.Kept:
			t.Errorf("%s × %s broke its promise: %s", r.Cell.Taken(), r.Cell.Nemesis, r.summary())
		case r.Cell.Nemesis != "none" && r.Faults == 0:
			t.Errorf("%s × %s: the nemesis never struck", r.Cell.Taken(), r.Cell.Nemesis)
		case r.Counts.Grants < minGrants(r.Cell):
			t.Errorf("%s × %s: only %d grants", r.Cell.Taken(), r.Cell.Nemesis, r.Counts.Grants)
		case r.Cell.holders() > 1 && r.Counts.MostHolders < r.Cell.holders():
			t.Errorf("%s × %s: never more than %d holders at once", r.Cell.Taken(), r.Cell.Nemesis, r.Counts.MostHolders)
		case (r.Cell.Primitive == "rwlock" || r.Cell.Primitive == "multilock") && r.Counts.SeveralKeys == 0:
			t.Errorf("%s × %s: no hold of several keys (writer, multi-key lock) granted", r.Cell.Taken(), r.Cell.Nemesis)
		}
	}
	// A Manager hands a lock over only while no other process is seen to
	// contend for the key (see dlm.Manager.Lock), so whether a given cell
	// sees hand-offs depends on timing: a slow machine's cells can be
	// contended throughout (CI saw 2 of 12 with none). The matrix as a
	// whole must still exercise them.
	if handedOff*4 < plain {
		t.Errorf("only %d of %d plain-lock cells saw an Unlock hand the lock over", handedOff, plain)
	}
}

// The suite finds a bug planted on purpose: leases that outlive the
// servers' keys (a strategy that skips the validity check) give two
// holders of a lock at once, and more holders than a semaphore has
// permits, when a holder pauses. Its cells run one after another, each of
// fixed length (MinAttempts 0), and not beside the short matrix (the
// package's parallel tests wait until it ends): beside it, under load,
// stopped at the nemesis's first heal a partitioned stale holder twice
// showed no overlap, and in fixed-length runs the nemesis found no long
// hold to strike in three.
func TestFindsPlantedBug(t *testing.T) {
	needRoot(t)
	for _, cell := range []Cell{
		shortCell("redlock", "pause-holder"),
		shortCell("redlock", "partition-holder"),
		primitiveCell("semaphore", "redlock", "pause-holder"),
	} {
		cell.Plant = "stale-lease"
		cell.MinAttempts = 0
		// The nemesis strikes a client in the middle of a long hold; on a
		// loaded machine it may find none within its wait (CI once saw
		// this). A run where it never struck shows nothing: run it again.
		var c Counts
		for try := 1; ; try++ {
			events, err := RunCell(cell, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			c = Check(events)
			if slices.ContainsFunc(events, func(e Event) bool { return e.Kind == Fault }) {
				break
			}
			if try == 3 {
				t.Fatalf("%s × %s: the nemesis never struck in %d runs", cell.Taken(), cell.Nemesis, try)
			}
			t.Logf("%s × %s: the nemesis never struck; run again", cell.Taken(), cell.Nemesis)
		}
		if keeps(cell.promise(), c) {
			t.Errorf("%s × %s: the planted bug went unnoticed: %+v", cell.Taken(), cell.Nemesis, c)
		}
		if cell.holders() > 1 && c.MostHolders <= cell.holders() {
			t.Errorf("%s × %s: never more holders than permits: %+v", cell.Taken(), cell.Nemesis, c)
		}
		t.Logf("%s × %s with stale leases: %+v", cell.Taken(), cell.Nemesis, c)
	}
}
