// Package sim is a simulator for dlm's strategies: seeded runs, each in a
// testing/synctest bubble of its own (virtual time), of several clients —
// each with its own Manager and its own Nodes — taking one key over a
// dlmtest deployment (single, Redlock of 3 or 5, failover with AckAll,
// AckMajority or AckNone), under a fault schedule drawn from the seed.
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
// the end of its Context); every acquisition's fence is above the fence of
// every acquisition that completed before it began; a Context ends no
// later than its validity; and once every fault healed the lock is granted
// again. Safety is required only of runs whose schedule stays within what
// dlm promises (docs/guarantees.md): a clock drifting faster than Bound, a
// clock jumping forward, a restart without data and without the guard, a
// promotion under AckMajority or AckNone mark a fault "beyond the promise".
//
// A failing run prints its seed, configuration and schedule. The schedule
// and each worker's choices come from the seed; the interleaving of
// goroutines that run at one virtual instant is the Go scheduler's, so a
// seed replays its faults exactly but not always every race.
//
//	go test ./internal/sim/                  # CI: 60 fresh seeds (10 under -race) and the planted bugs
//	go test ./internal/sim/ -run TestSeeds -sim.seeds=20000 -timeout 0   # a soak
//	go test ./internal/sim/ -run TestSeeds -seed=12345 -v                # one seed again
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
// unknown flag as a package.) A run costs about 0.1 to 0.2s of CPU: 12s of
// virtual faults, then the liveness check and a minute for the strategies'
// background work; scripts run in gopher-lua, which is most of the cost.
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
