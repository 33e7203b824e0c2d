// Package sim is a simulator for dlm's strategies: seeded runs, each in a
// testing/synctest bubble of its own (virtual time), of several clients —
// each with its own Manager and its own Nodes — taking one key over a
// dlmtest deployment (single, Redlock of 3 or 5, failover with AckAll,
// AckMajority or AckNone), under a fault schedule drawn from the seed.
// Half the runs take the plain lock (Manager.Lock); the others one of the
// lock family's primitives (Prim): a fairlock (single and failover), a
// semaphore of 2 permits, or an rwlock of at most 2 readers whose takes
// write one time in three.
//
// Faults: server reply delays, lost replies, pauses and slowness; one
// client's link delayed or cut from some servers; restarts with and
// without data; server clocks drifting within and beyond the drift bound
// (Bound) and jumping; holders that stop, ignoring their Context, and then
// unlock; on failover, promotions and lagging or frozen replicas. The
// amnesia guard (strategy.WithMaxTTL) is drawn on or off.
//
// After each run, in true (virtual) time: no two valid leases overlap (a
// lease is valid from the return of Lock until the earlier of its Until and
// the end of its Context); every acquisition of a key by the strategies
// has a fence above that of every acquisition of the key that completed
// before it began; a Context ends no later than its validity; and once
// every fault healed the lock (primitive) is granted again. For the
// family, "no overlap" is its own rule: a semaphore's valid permits never
// exceed 2; an rwlock writer's hold overlaps no other hold and valid
// readers never exceed 2; a fair lock is granted to no waiter while an
// earlier arrival keeps its place in the queue (checked unless the queue
// may be lost: a restart without data, a promotion, a fault beyond the
// promise). Safety is required only of runs whose schedule stays within what
// dlm promises (docs/guarantees.md): a clock drifting faster than Bound, a
// clock jumping forward, a restart without data and without the guard, a
// promotion under AckMajority or AckNone mark a fault "beyond the promise".
//
// The 3 seeds in 10,000 that once failed "fence back" under failover-all
// (8801472802284866475, 8801472802284863246, 8801472802284862786: a
// replica lagging or frozen, then promoted) were dlmtest's: a WAIT in
// flight across a promotion counted the replicas' new offsets as
// acknowledging writes the promoted replica never got. It fails now, as
// Redis fails it (UNBLOCKED), and 10,000 seeds from 8801472802284857000
// pass (240s, 2 cores, nothing else running).
//
// A failing run prints its seed, configuration and schedule. The schedule
// and each worker's choices come from the seed; the interleaving of
// goroutines that run at one virtual instant is the Go scheduler's, so a
// seed replays its faults exactly but not always every race.
//
//	go test ./internal/sim/                  # CI: 300 fresh seeds (10 under -race) and the planted bugs
//	go test ./internal/sim/ -run TestSeeds -sim.seeds=10000 -timeout 0   # a soak
//	go test ./internal/sim/ -run TestSeeds -seed=12345 -v                # one seed again
//	go test ./internal/sim/ -run TestSeeds -sim.prim=rwlock -sim.base=1 -sim.seeds=500   # one primitive, fixed seeds
//	go test ./internal/sim/ -run TestFigures -sim.figures -v
//
// Liveness under contention (RunContention, TestContention): several
// Managers take one key over Redlock while some nodes delay each request
// by a drawn amount, counting grants, attempts and split votes in a span
// of virtual time.
//
//	go test ./internal/sim/ -run TestContention -v
//
// SIMDEBUG=1 in the environment prints every grant (virtual time, client,
// worker, fence), and TestContention's attempts of the first 3s (start,
// end, each node's answer). (The package comes before the flags: go test reads a value after an
// unknown flag as a package.) A run of the plain lock costs about 16ms of
// CPU (a mix of primitives about 30ms, of which semaphore runs over Redlock
// whose waiters wake each other take the most: see
// TestSemaphoreWaitersWakeEachOther): 12s of virtual faults, then the
// liveness check and a minute for the strategies' background work (a day
// for the permits' record of a semaphore or rwlock without the guard).
// Scripts run in gopher-lua, compiled once per process: running them is
// about a third of the CPU.
//
// Every link has a round trip of 100µs to 2ms (drawn per link): with none,
// calls take no virtual time, and Managers whose Redlock attempts split the
// votes wake each other through the undo's release notifications at one
// virtual instant forever.
//
// Bugs can be planted (Bug) by wrappers around the Nodes and the Strategy;
// TestPlanted shows each is found, and that the seed that found it passes
// without the bug. The wrappers recognise scripts by their source (learnt
// from EVAL calls) and shape, so they run with coalescing off.
package sim
