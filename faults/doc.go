// Package faults is dlm's fault suite: it runs each lock primitive over
// each strategy (one server, Redlock's five masters, a Sentinel-managed
// primary with replicas, a Cluster) under each nemesis (servers frozen,
// killed and restarted with or without their data, the holder paused or
// cut off, partitions, packet loss, delayed replies, failovers, slot
// migrations, wall clocks moved), on real redis-server and redis-sentinel
// processes and client processes, each in a Linux network namespace of
// its own, and checks the history against what dlm's documentation
// promises: no two valid leases of a key at once (beyond a semaphore's
// permits), fences that never go back, a fenced register that accepts no
// write from a holder after a larger fence was granted (and is
// linearizable, checked with porcupine), and availability.
//
// A Cell is one run (a strategy, a nemesis, clients and workers, a
// duration); RunCell runs it and returns its Events, and Check counts what
// they show. Matrix runs many cells and judges each Result kept, expected
// (where the documentation says the guarantee does not hold) or broken;
// WriteResults writes results.json and results.md. The client processes
// are the test or command binary itself: its main (or TestMain) calls
// MainIfClient first.
//
// It needs root (network namespaces), redis-server, redis-sentinel, ip
// (iproute2), nsenter (util-linux) and, for packet loss, nft (nftables).
// The command faults/cmd/dlmfaults runs the whole matrix; TestShortMatrix
// runs a short one in CI. docs/faults.md describes the nemeses, the
// checker and the committed results. It is a module of its own, so that
// porcupine and golang.org/x/sys stay out of dlm's go.mod.
package faults
