package main

// contenders is the registry: every lock library and configuration the run
// measures. A dlm contender is one line: a name, the number of nodes (1 for
// single-instance, 5 for Redlock), a node factory (driver) and a strategy
// factory, plus Manager options. Wrap it in renewing(...) when its locks
// renew themselves, so it joins the renewal scenario. For example, once the
// Redlock strategy, the rueidis driver and auto-renewal land:
//
//	dlmContender("dlm redlock/rueidis", 5, rueidisNode, redlockStrategy),
//	renewing(dlmContender("dlm single/goredis +renew", 1, goredisNode, singleStrategy,
//		func(e Env) dlm.Option { return dlm.WithAutoRenew(e.TTL / 2) })),
//
// with rueidisNode a NodeFactory and redlockStrategy a StrategyFactory
// written next to goredisNode and singleStrategy in dlmadapter.go.
//
// Peers are every contender whose Lib is not "dlm"; each figure is also shown
// as a ratio to the best peer on the same number of nodes.
var contenders = []Contender{
	dlmContender("dlm single/goredis", 1, goredisNode, singleStrategy),

	bsmContender("bsm/redislock"),
	rueidislockContender("rueidislock", 1),
	rueidislockContender("rueidislock 3 keys (default)", 2),
	redsyncContender("redsync/goredis", 1, false, redsyncGoredis),
	redsyncContender("redsync/redigo", 1, false, redsyncRedigo),
	redsyncContender("redsync/rueidis", 1, false, redsyncRueidis),

	redsyncContender("redsync/goredis x5", 5, false, redsyncGoredis),
	redsyncContender("redsync/goredis x5 failfast", 5, true, redsyncGoredis),
	redsyncContender("redsync/redigo x5", 5, false, redsyncRedigo),
	redsyncContender("redsync/rueidis x5", 5, false, redsyncRueidis),
}
