package faults

import (
	"os"
	"testing"
	"time"

	"github.com/dlmgo/dlm/fencing/pgtest"
)

// needPostgres skips a test that starts PostgreSQL when it is not
// installed, unless DLM_REQUIRE_REDIS is set (in CI), where it fails.
func needPostgres(t *testing.T) {
	t.Helper()
	if _, err := pgtest.Bin(); err != nil {
		if os.Getenv("DLM_REQUIRE_REDIS") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// storeCell is a short cell whose register is a real store and whose
// paused or cut-off holders write late (Cell.LateWrites).
//
// It runs 12s, not the short matrix's 8s: a late write needs the nemesis
// to strike a long hold whose lease then ends, which under the race
// detector on a loaded machine (load 19 on 2 cores) did not happen within
// 8s in three runs of redlock × pause-holder.
func storeCell(register, strategy, nemesis string) Cell {
	c := shortCell(strategy, nemesis)
	c.Register, c.LateWrites = register, true
	c.Duration = 12 * time.Second
	return c
}

// runLate runs cell until a run has a late write (at most three runs: on
// a loaded machine the nemesis may find no long hold to strike) and
// returns that run's counts.
func runLate(t *testing.T, cell Cell) Counts {
	t.Helper()
	for try := 1; ; try++ {
		events, err := RunCell(cell, t.TempDir())
		if err != nil {
			t.Fatalf("%s × %s: %v", cell.Taken(), cell.Nemesis, err)
		}
		c := Check(events)
		faults := 0
		for _, e := range events {
			if e.Kind == Fault {
				faults++
			}
		}
		t.Logf("%s × %s: %d faults, %+v", cell.Taken(), cell.Nemesis, faults, c)
		if c.LateWrites > 0 {
			return c
		}
		if try == 3 {
			t.Fatalf("%s × %s: no late write in %d runs", cell.Taken(), cell.Nemesis, try)
		}
		t.Logf("%s × %s: no late write; run again", cell.Taken(), cell.Nemesis)
	}
}

// The register's store refuses late writes: under a paused holder, a
// holder cut off from the lock's servers and a failover, holders write
// once more after their leases ended, and the store (PostgreSQL through
// fencing.SQL, Redis through fencing.Redis) accepts none of them after a
// larger fence was granted. A paused holder's late write comes 2.5 TTLs
// after its pause began, long after another client took the lock and
// wrote: the store must have refused it. In a failover no lock is granted
// until a replica is promoted, so a late write may rightly be accepted.
//
// Each cell is a parallel subtest on a network of its own.
func TestStoreRegisterCells(t *testing.T) {
	t.Parallel()
	needRoot(t)
	needPostgres(t)
	for _, cell := range []Cell{
		storeCell("postgres", "single", "pause-holder"),
		storeCell("redis", "single", "partition-holder"),
		storeCell("postgres", "failover-ack-all", "failover"),
	} {
		t.Run(cell.Taken()+"×"+cell.Nemesis, func(t *testing.T) {
			t.Parallel()
			c := runLate(t, cell)
			p := cell.promise()
			if !p.Fences || !keeps(p, c) {
				t.Errorf("%s × %s broke its promise: %+v", cell.Taken(), cell.Nemesis, c)
			}
			if c.StoreErrors > 0 || c.StoreAccepted == 0 {
				t.Errorf("%s × %s: the store accepted %d writes and failed %d", cell.Taken(), cell.Nemesis, c.StoreAccepted, c.StoreErrors)
			}
			if cell.Nemesis == "pause-holder" && c.LateRefused == 0 {
				t.Errorf("%s × %s: no late write refused by the store: %+v", cell.Taken(), cell.Nemesis, c)
			}
		})
	}
}

// A store that writes without the fence check (a service that never
// passed the fence on) accepts a paused holder's late write after another
// holder got a larger fence and wrote: the cell reports lost writes and
// a broken promise.
func TestStoreRegisterFindsUnfencedStore(t *testing.T) {
	t.Parallel()
	needRoot(t)
	needPostgres(t)
	cell := storeCell("postgres", "single", "pause-holder")
	cell.Plant = unfencedStore
	c := runLate(t, cell)
	if c.LostWrites == 0 || keeps(cell.promise(), c) {
		t.Errorf("%s × %s: the unfenced store went unnoticed: %+v", cell.Taken(), cell.Nemesis, c)
	}
	if c.SavedWrites > 0 {
		t.Errorf("%s × %s: an unfenced store refused %d writes", cell.Taken(), cell.Nemesis, c.SavedWrites)
	}
}
