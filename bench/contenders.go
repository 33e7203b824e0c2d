package main

// contenders is the registry: every lock library and configuration the run
// measures. A dlm contender is one line: a name, the number of nodes (1 for
// single-instance, 5 for Redlock), a node factory (driver) and a strategy
// factory (dlmadapter.go), plus Manager options. dlmRenewing is the same
// with auto-renewal, for the renewal scenario alone. Wrap a contender in
// renewing(...) when its locks renew themselves, so it joins the renewal
// scenario.
//
// Peers are every contender whose Lib is not "dlm"; each figure is also shown
// as a ratio to the best peer on the same number of nodes.
//
// redsync's valkey-go adapter (redis/valkeygo) is not here: it needs
// github.com/valkey-io/valkey-go/valkeycompat, which the module proxy does
// not serve (403 for v1.0.79).
//
// The failover strategy is not here: it needs a primary with replicas and
// Sentinel, a topology no peer supports.
var contenders = []Contender{
	dlmContender("dlm single/goredis", 1, goredisNode, singleStrategy),
	dlmContender("dlm single/redigo", 1, redigoNode, singleStrategy),
	dlmContender("dlm single/rueidis", 1, rueidisNode, singleStrategy),
	dlmContender("dlm single/valkeygo", 1, valkeyNode, singleStrategy),
	dlmRenewing("dlm single/goredis +renew", 1, goredisNode, singleStrategy),
	dlmRenewing("dlm single/redigo +renew", 1, redigoNode, singleStrategy),
	dlmRenewing("dlm single/rueidis +renew", 1, rueidisNode, singleStrategy),
	dlmRenewing("dlm single/valkeygo +renew", 1, valkeyNode, singleStrategy),

	bsmContender("bsm/redislock"),
	rueidislockContender("rueidislock", 1),
	rueidislockContender("rueidislock 3 keys (default)", 2),
	redsyncContender("redsync/goredis", 1, false, redsyncGoredis),
	redsyncContender("redsync/redigo", 1, false, redsyncRedigo),
	redsyncContender("redsync/rueidis", 1, false, redsyncRueidis),

	dlmContender("dlm redlock/goredis", 5, goredisRedlockNode, redlockStrategy),
	dlmContender("dlm redlock/redigo", 5, redigoNode, redlockStrategy),
	dlmContender("dlm redlock/rueidis", 5, rueidisNode, redlockStrategy),
	dlmContender("dlm redlock/valkeygo", 5, valkeyNode, redlockStrategy),
	dlmRenewing("dlm redlock/goredis +renew", 5, goredisRedlockNode, redlockStrategy),

	redsyncContender("redsync/goredis x5", 5, false, redsyncGoredis),
	redsyncContender("redsync/goredis x5 failfast", 5, true, redsyncGoredis),
	redsyncContender("redsync/redigo x5", 5, false, redsyncRedigo),
	redsyncContender("redsync/rueidis x5", 5, false, redsyncRueidis),
}

func init() { contenders = append(contenders, familyContenders...) }
