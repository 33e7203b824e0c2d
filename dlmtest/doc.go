// Package dlmtest is an in-process Redis deployment for tests, as
// testing/fstest is for io/fs: code that takes dlm locks is tested with no
// server, and tests of time (TTLs, renewal, expiry) run under
// testing/synctest, where a 10s TTL passes in microseconds.
//
// A [Server] is a primary, with replicas when asked ([WithReplicas]); its
// [Node]s are clients of it and implement driver.Node, so the strategies run
// over them unchanged: strategy.NewSingle(srv.Node()), NewRedlock over
// Nodes of several Servers, NewFailover over a Server with replicas. The
// Server runs the scripts it is sent with gopher-lua as Redis 7.0 runs
// them (EVAL caches by SHA1, EVALSHA of an unknown digest is NOSCRIPT, one
// command at a time, error replies with Redis' codes) and answers the
// commands [Commands] lists; any other is an error reply, so that a script
// that starts using one fails loudly.
//
// What it models: one clock per server ([Clock]: rate and jumps), by
// which keys expire; replication in order with a lag per replica, WAIT,
// and promotion ([Replica], [Server.Promote]); PUBLISH to Node.Watch; and
// faults: on a Server, reply delays, lost replies, slowness, pauses and
// restarts with or without data; on a Node (one client), partitions,
// delays and lost replies, and any fault per message a function of the
// test's draws ([Node.SetFaults]).
//
// What it does not: no network (drivers are tested against redis-server),
// no Cluster, Sentinel or shard channels (SPUBLISH reaches no Node), no
// WAITAOF, no eviction or maxmemory, no ACLs, and only the commands
// listed. Script effects are replicated as the written keys' values.
//
// Under synctest, start the Servers inside the bubble and, before it
// ends, let the strategies' background work finish (a minute of virtual
// time) and Close the Servers:
//
//	synctest.Test(t, func(t *testing.T) {
//		srv := dlmtest.NewServer()
//		defer srv.Close()
//		single, _ := strategy.NewSingle(srv.Node())
//		...
//		time.Sleep(time.Minute)
//	})
package dlmtest
