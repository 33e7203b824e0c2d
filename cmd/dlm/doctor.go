package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

const doctorUsage = `usage: dlm doctor [flags]

Checks every server of the configured deployment for what makes locks unsafe
or slow, and says what to change: eviction policy, persistence and fsync,
replicas and their lag, Cluster mode, the server version and the commands
the strategies use (WAIT, WAITAOF, CLIENT for tracking). For redlock it
checks every master and that they are distinct servers; for sentinel:// it
asks the Sentinels for the primary, checks it and each of its replicas, and
compares the replicas with the ack policy; for cluster:// it asks the first
listed node that answers for the Cluster's nodes and checks every master and
replica (reachable, its role, cluster_state, every slot served, replicas'
links, and, with strategy=failover, each master's replicas against the ack
policy). On every server it compares the server's clock with this machine's:
Redis expires keys by its wall clock, so a clock that is off by more than a
tenth of the TTL (--ttl, else the config's, else 30s) is a sign that clocks
are not kept in step, and a step back into step frees locks early. For
sentinel:// and cluster:// it compares how long a failover takes with what
dlm run rides through at that TTL.

Exit status: 0 when nothing needs changing, 1 when something does, 2 on
usage or configuration errors.

`

// A finding is one line of the doctor's report.
type finding struct {
	level string // "ok", "warn" or "fail"
	text  string
}

// report collects findings per server and counts the problems.
type report struct {
	w        io.Writer
	problems int
	ttl      time.Duration // the locks' TTL, which the clock check measures against
}

func (r *report) section(title string) { fmt.Fprintf(r.w, "\n%s\n", title) }

func (r *report) add(fs ...finding) {
	for _, f := range fs {
		fmt.Fprintf(r.w, "  %-4s %s\n", f.level, f.text)
		if f.level != "ok" {
			r.problems++
		}
	}
}

func (r *report) addf(level, format string, args ...any) {
	for i, a := range args {
		if err, ok := a.(error); ok { // the report is dlm's: no "dlm: " on each line
			args[i] = errs.Cause(err)
		}
	}
	r.add(finding{level, fmt.Sprintf(format, args...)})
}

func doctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage+targetUsage(defaultURL)+"\nflags:\n"); fs.PrintDefaults() }
	tf := addTargetFlags(fs, defaultURL)
	timeout := fs.Duration("timeout", 2*time.Second, "bound on each server's checks")
	ttl := fs.Duration("ttl", 0, "the TTL locks use, for the clock check and the failover-time verdict (default: the config's ttl, else 30s)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	cfg, err := tf.load()
	if err != nil {
		fmt.Fprintln(stderr, "dlm doctor:", err)
		return 2
	}
	if *ttl <= 0 {
		*ttl = time.Duration(cfg.TTL)
	}
	if *ttl <= 0 {
		*ttl = runDefaultTTL
	}
	_, closer, err := tf.open(ctx, cfg) // the same checks as dlm run
	if err != nil {
		fmt.Fprintln(stderr, "dlm doctor:", err)
		return 2
	}
	_ = closer.Close()
	fmt.Fprintf(stdout, "dlm doctor: %s strategy, %s\n", cfg.Strategy, cfg)
	r := &report{w: stdout, ttl: *ttl}
	check := func(addr string, f func(context.Context, *redis.Client) map[string]string) map[string]string {
		c := serverClient(cfg, addr)
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return f(cctx, c)
	}
	switch {
	case cfg.Cluster:
		checkCluster(ctx, cfg, *timeout, r)
	case cfg.Strategy == "failover":
		primary := cfg.Addrs[0]
		if cfg.Master != "" {
			r.section(fmt.Sprintf("Sentinels for %s", quoteInput(cfg.Master)))
			primary = checkSentinels(ctx, cfg, *timeout, r)
			if primary == "" {
				break
			}
		}
		r.section(primary + " (primary)")
		info := check(primary, func(ctx context.Context, c *redis.Client) map[string]string { return checkServer(ctx, c, cfg, r) })
		if info == nil {
			break
		}
		checkAcks(cfg, info, r)
		for _, rs := range replicaStates(info) {
			r.section(rs.addr + " (replica)")
			check(rs.addr, func(ctx context.Context, c *redis.Client) map[string]string { return checkReplica(ctx, c, cfg, r) })
		}
	default:
		if n := len(cfg.Addrs); cfg.Strategy == "redlock" && (n < 3 || n%2 == 0) {
			r.section("redlock")
			if n < 3 {
				r.addf("warn", "%d master(s): the quorum is %d, so one master down stops every lock; use at least 3", n, n/2+1)
			} else {
				r.addf("warn", "%d masters tolerate no more failures than %d do (quorum %d); use an odd number", n, n-1, n/2+1)
			}
		}
		runIDs := map[string]string{}
		for _, addr := range cfg.Addrs {
			r.section(addr)
			info := check(addr, func(ctx context.Context, c *redis.Client) map[string]string { return checkServer(ctx, c, cfg, r) })
			if id := info["run_id"]; id != "" {
				if other, ok := runIDs[id]; ok {
					r.addf("fail", "the same server as %s: Redlock needs independent masters", other)
				}
				runIDs[id] = addr
			}
		}
	}
	fcfg := cfg // the failover-time verdict is for the TTL in use: --ttl's when given
	fcfg.TTL = config.Duration(*ttl)
	checkFailoverTime(ctx, fcfg, *timeout, r)
	if r.problems > 0 {
		fmt.Fprintf(stdout, "\n%d thing(s) to change\n", r.problems)
		return 1
	}
	fmt.Fprintln(stdout, "\nnothing to change")
	return 0
}

// serverClient returns a client for the checks on one server of cfg.
func serverClient(cfg config.Config, addr string) *redis.Client {
	tc, _ := cfg.TLSConfig() // Open has read the files already
	return redis.NewClient(&redis.Options{
		Addr: addr, Username: cfg.Username, Password: cfg.Password, DB: cfg.DB,
		ContextTimeoutEnabled: true, MaxRetries: -1, Dialer: nodekit.Dialer(tc, time.Second),
	})
}

// checkSentinels asks each Sentinel for the primary and returns the address
// the first one that answered gave ("" when none did).
func checkSentinels(ctx context.Context, cfg config.Config, timeout time.Duration, r *report) string {
	primary := ""
	for _, addr := range cfg.Addrs {
		if !checkSentinelTransport(ctx, cfg, addr, r) {
			continue
		}
		stc, _ := cfg.SentinelTLSConfig()
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: addr, Username: cfg.SentinelUsername, Password: cfg.SentinelPassword,
			Dialer: nodekit.Dialer(stc, time.Second), MaxRetries: -1, ContextTimeoutEnabled: true,
		})
		cctx, cancel := context.WithTimeout(ctx, timeout)
		hp, err := sc.GetMasterAddrByName(cctx, cfg.Master).Result()
		switch {
		case errors.Is(err, redis.Nil):
			r.addf("fail", "%s knows no master named %s: check the name (SENTINEL MASTERS lists the ones it monitors)", addr, quoteInput(cfg.Master))
		case errors.As(err, new(*nodekit.TLSError)):
			r.addf("fail", "%s: %v: check sentinel_tls and the tls_* fields (docs/tls.md)", addr, err)
		case err != nil && permanent(err):
			r.addf("fail", "%s: %v: check sentinel_username and sentinel_password", addr, err)
		case err != nil:
			r.addf("fail", "%s: %v", addr, err)
		case len(hp) != 2:
			r.addf("fail", "%s: unexpected reply %v", addr, hp)
		default:
			got := net.JoinHostPort(hp[0], hp[1])
			switch {
			case primary == "":
				primary = got
				r.addf("ok", "%s: primary %s", addr, got)
			case got != primary:
				r.addf("warn", "%s: primary %s, but another Sentinel says %s: a failover is under way or the Sentinels are split", addr, got, primary)
			default:
				r.addf("ok", "%s: primary %s", addr, got)
			}
			if q, err := sc.CkQuorum(cctx, cfg.Master).Result(); err != nil {
				r.addf("warn", "%s: SENTINEL CKQUORUM: %v: Sentinel could not fail over", addr, err)
			} else {
				r.addf("ok", "%s: %s", addr, q)
			}
		}
		cancel()
		_ = sc.Close()
	}
	if len(cfg.Addrs) < 3 {
		r.addf("warn", "%d Sentinel(s) in the config: list at least three, so the client finds the primary while one is down", len(cfg.Addrs))
	}
	return primary
}

// checkAcks compares the replicas of a primary, from its INFO, with the
// ack policy. The strategy asks WAIT for acknowledgements from as many
// replicas as are connected (or as replicas= says, when more), but only a
// replica the primary reports online acknowledges anything: one still
// waiting for or loading its first full sync (state wait_bgsave or
// send_bulk) is connected and not in sync.
func checkAcks(cfg config.Config, info map[string]string, r *report) {
	connected, _ := strconv.Atoi(info["connected_slaves"])
	inSync := 0
	for _, rs := range replicaStates(info) {
		if rs.online() {
			inSync++
		}
	}
	inSync = min(inSync, connected)
	have := fmt.Sprintf("%d replica(s) connected", connected)
	if inSync < connected {
		have = fmt.Sprintf("%d replica(s) in sync (%d connected)", inSync, connected)
	}
	ack := strategy.AckAll()
	if cfg.Ack != nil {
		ack = *cfg.Ack
	}
	configured := 1
	if cfg.Replicas != nil {
		configured = *cfg.Replicas
	}
	counted := max(configured, connected)
	switch ack {
	case strategy.AckNone():
		r.addf("warn", "ack none: no replica acknowledges a lock, so a failover can hand a held lock to a second owner; use ack=all")
		return
	case strategy.AckAll():
		switch {
		case connected < configured:
			r.addf("fail", "ack all with replicas=%d, but %s: every lock is refused until they are back", configured, have)
		case inSync < counted:
			r.addf("fail", "ack all asks %d acknowledgement(s), but %s: every lock is refused until every replica is in sync", counted, have)
		default:
			r.addf("ok", "ack all: %d acknowledgement(s) per lock from %d connected replica(s)", counted, connected)
		}
	case strategy.AckMajority():
		need := counted/2 + 1
		if inSync < need {
			r.addf("fail", "ack majority needs %d acknowledgement(s), %s: every lock is refused", need, have)
		} else {
			r.addf("warn", "ack majority: %d of %d replicas acknowledge; Sentinel may promote one that did not, so only ack=all keeps every lock through a failover", need, counted)
		}
	default:
		need, _ := strconv.Atoi(ack.String())
		switch {
		case inSync < need:
			r.addf("fail", "ack %d, but %s: every lock is refused", need, have)
		case need < connected:
			r.addf("warn", "ack %d of %d connected replicas: Sentinel may promote one that did not acknowledge; use ack=all", need, connected)
		default:
			r.addf("ok", "ack %d: every connected replica acknowledges", need)
		}
	}
	if configured < connected {
		r.addf("warn", "replicas=%d in the config, %d connected: if replicas drop off, fewer acknowledgements are asked for; set replicas=%d", configured, connected, connected)
	}
}

// A replicaState is one replica as its primary's INFO replication lists
// it (slaveN:ip=…,port=…,state=…,offset=…,lag=…).
type replicaState struct {
	addr, state, lag string
}

// online reports whether the primary counts the replica in sync: its first
// full sync done, so that it receives and acknowledges every write.
// A replica listed without a state (servers before 2.8) counts as in sync.
func (rs replicaState) online() bool { return rs.state == "online" || rs.state == "" }

// replicaStates lists the replicas in the primary's INFO replication.
func replicaStates(info map[string]string) []replicaState {
	var out []replicaState
	for i := 0; ; i++ {
		v, ok := info["slave"+strconv.Itoa(i)]
		if !ok {
			return out
		}
		kv := map[string]string{}
		for _, f := range strings.Split(v, ",") {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
		if kv["ip"] != "" && kv["port"] != "" {
			out = append(out, replicaState{addr: net.JoinHostPort(kv["ip"], kv["port"]), state: kv["state"], lag: kv["lag"]})
		}
	}
}

// checkReplicaStates reports each replica the primary lists that is not in
// sync: connected, but waiting for or loading its first full sync, so that
// it acknowledges nothing and holds none of the locks.
func checkReplicaStates(info map[string]string, r *report) {
	for _, rs := range replicaStates(info) {
		if !rs.online() {
			r.addf("warn", "replica %s is not in sync (state %s, as the primary reports it: its first full sync has not finished): it acknowledges no lock and holds none, until it is online", rs.addr, orUnknown(rs.state))
		}
	}
}

// checkReplica inspects a replica of the failover primary.
func checkReplica(ctx context.Context, c *redis.Client, cfg config.Config, r *report) map[string]string {
	if !checkTransport(ctx, cfg, c.Options().Addr, r) {
		return nil
	}
	info := ping(ctx, c, r)
	if info == nil {
		return nil
	}
	if role := info["role"]; role != "slave" && role != "replica" {
		r.addf("fail", "role %s: listed as a replica, but it is not one", role)
	}
	if st := info["master_link_status"]; st != "up" {
		r.addf("warn", "link to the primary %s: it acknowledges nothing until it is up", orUnknown(st))
	} else {
		r.addf("ok", "link to the primary up")
	}
	aof := info["aof_enabled"] == "1"
	switch {
	case aof:
		r.addf("ok", "AOF on: acknowledged locks survive this replica's restart")
	case cfg.WaitAOF != "":
		r.addf("fail", "AOF off: wait_aof waits for this replica's fsync, which never comes; set appendonly yes")
	case hasWaitAOF(info):
		r.addf("warn", "AOF off: a restart forgets the locks it acknowledged, and a promotion after that loses them; set appendonly yes (and wait_aof=replicas)")
	default:
		r.addf("warn", "AOF off: a restart forgets the locks it acknowledged, and a promotion after that loses them; set appendonly yes (wait_aof, which waits for the replicas' fsync, needs Redis 7.2; this is %s)", orUnknown(info["redis_version"]))
	}
	if p := configGet(ctx, c, "replica-priority"); p == "0" {
		r.addf("ok", "replica-priority 0: Sentinel never promotes it")
	}
	return info
}

// ping checks that the server answers and returns its INFO, or nil.
func ping(ctx context.Context, c *redis.Client, r *report) map[string]string {
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		if errors.As(err, new(*nodekit.TLSError)) {
			r.addf("fail", "%v: check tls and the tls_* fields (docs/tls.md)", err)
		} else if dbOutOfRange(err) {
			r.addf("fail", "db=%d: %v: the server has no such database; it has databases 0 to its databases setting - 1 (16 by default): give a lower db, or raise databases", c.Options().DB, err)
		} else if permanent(err) {
			r.addf("fail", "authentication failed: %v: put the right user and password in the URL (single://user:password@host:port, percent-encoded)", err)
		} else {
			r.addf("fail", "unreachable: %v", err)
		}
		return nil
	}
	r.addf("ok", "reachable, PING in %v", time.Since(start).Round(10*time.Microsecond))
	checkClock(ctx, c, r)
	if err := c.Eval(ctx, "return 1", nil).Err(); err != nil {
		r.addf("fail", "scripts refused (%v): locks cannot be taken here; is this a Sentinel's port, or an ACL without EVAL/EVALSHA?", err)
		return nil
	}
	raw, err := c.Info(ctx, "server", "memory", "persistence", "replication", "cluster").Result()
	if err != nil {
		r.addf("fail", "INFO failed: %v", err)
		return nil
	}
	return parseInfo(raw)
}

// checkClock compares the server's wall clock with this machine's, taking
// the server's reading to be from the middle of the TIME round trip.
func checkClock(ctx context.Context, c *redis.Client, r *report) {
	before := time.Now()
	at, err := c.Time(ctx).Result()
	if err != nil {
		r.addf("warn", "TIME failed (%v): the server's clock was not compared with this machine's", err)
		return
	}
	rtt := time.Since(before)
	off := at.Sub(before.Add(rtt / 2)).Round(time.Millisecond)
	bound := r.ttl / 10
	switch {
	case off.Abs() > bound+rtt/2:
		way := "ahead of"
		if off < 0 {
			way = "behind"
		}
		r.addf("warn", "clock %v %s this machine's (more than a tenth of the %v TTL): clocks are not kept in step, and Redis expires keys by its wall clock, so when this one is stepped forward every lock on it ends early by the step; run NTP on both, slewing rather than stepping", off.Abs(), way, r.ttl)
	default:
		r.addf("ok", "clock within %v of this machine's", (off.Abs() + rtt/2).Round(time.Millisecond))
	}
}

// checkServer inspects a server locks are taken on and returns its INFO, or
// nil when it could not be read.
func checkServer(ctx context.Context, c *redis.Client, cfg config.Config, r *report) map[string]string {
	if !checkTransport(ctx, cfg, c.Options().Addr, r) {
		return nil
	}
	info := ping(ctx, c, r)
	if info == nil {
		return nil
	}
	strat := cfg.Strategy

	version := info["redis_version"]
	major, _ := versionParts(version)
	r.add(versionFinding(version, cfg))

	switch p := info["maxmemory_policy"]; {
	case p == "noeviction" && info["maxmemory"] != "" && info["maxmemory"] != "0":
		r.addf("warn", "maxmemory %s with noeviction: nothing is evicted, but once memory is full every lock is refused with OOM; keep headroom (used_memory %s) or give locks a server of their own", info["maxmemory_human"], info["used_memory_human"])
	case p == "noeviction":
		r.addf("ok", "maxmemory-policy noeviction: lock keys and fencing counters are never evicted")
	case p == "":
		r.addf("warn", "maxmemory-policy unknown; set it to noeviction")
	default:
		r.addf("warn", "maxmemory-policy %s can evict lock keys (they have TTLs) or fencing counters: a second owner could take a held lock; set maxmemory-policy noeviction, or keep locks on a server without maxmemory", p)
	}

	aof := info["aof_enabled"] == "1"
	fsync := configGet(ctx, c, "appendfsync")
	why := "a restart loses every lock and resets fencing counters"
	if strat == "redlock" {
		why = "a restart loses this master's locks and fencing counters, and with a minority that missed the last acquisitions the quorum can grant a held lock again with a fence that is not larger"
	}
	switch {
	case aof && fsync == "always":
		r.addf("ok", "AOF on with appendfsync always: locks and fencing counters survive a restart")
	case aof:
		r.addf("warn", "AOF on with appendfsync %s: a crash can lose the last writes, and with them held locks and fence increments; set appendfsync always (or delay restarts by the longest TTL)", orUnknown(fsync))
	case cfg.WaitAOF == "local":
		r.addf("fail", "AOF off: wait_aof=local waits for this server's fsync, which never comes; set appendonly yes")
	default:
		r.addf("warn", "AOF off: %s; set appendonly yes and appendfsync always (or delay restarts by the longest TTL and never reuse fences across restarts)", why)
	}

	role := info["role"]
	replicas, _ := strconv.Atoi(info["connected_slaves"])
	switch {
	case role == "slave" || role == "replica":
		r.addf("fail", "this server is a replica (read-only); locks must be taken on a primary")
	case strat == "failover" && replicas == 0:
		r.addf("warn", "no connected replicas: WAIT cannot protect locks against a failover")
	case strat == "failover":
		r.addf("ok", "%d connected replica(s)%s", replicas, replicaLag(info))
		checkReplicaStates(info, r)
	case strat == "redlock" && replicas > 0:
		r.addf("warn", "%d replica(s): Redlock wants independent masters; a failover to a replica that missed a write breaks the quorum's guarantee", replicas)
	case replicas > 0 && cfg.Cluster:
		r.addf("warn", "%d replica(s): replication is asynchronous, a failover can lose a held lock; consider the failover strategy (cluster://...?strategy=failover&ack=all)", replicas)
	case replicas > 0:
		r.addf("warn", "%d replica(s): replication is asynchronous, a failover can lose a held lock; consider the failover strategy (sentinel://)", replicas)
	default:
		r.addf("ok", "no replicas")
	}

	switch {
	case info["cluster_enabled"] == "1" && cfg.Cluster:
		r.addf("ok", "Cluster mode: each lock and its fencing counter share a hash slot")
	case info["cluster_enabled"] == "1":
		r.addf("fail", "Cluster mode: this node serves only its own slots, so locks on the others fail with MOVED; give the Cluster as cluster://%s", c.Options().Addr)
	case cfg.Cluster:
		r.addf("fail", "cluster mode off: this server is not a Cluster node; use single:// or failover://")
	}

	for _, cmd := range []string{"wait", "waitaof", "client"} {
		if cmd == "waitaof" && !hasWaitAOF(info) || cmd == "client" && major < 6 {
			continue // the version's finding above says so
		}
		if !hasCommand(ctx, c, cmd) {
			level := "ok"
			if cmd == "wait" && strat == "failover" || cmd == "waitaof" && cfg.WaitAOF != "" {
				level = "fail"
			}
			if level == "ok" {
				level = "warn"
			}
			r.addf(level, "command %s not available on Redis %s (renamed, or refused by an ACL)", strings.ToUpper(cmd), version)
		}
	}
	return info
}

func parseInfo(raw string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(raw, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func versionParts(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

func configGet(ctx context.Context, c *redis.Client, name string) string {
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		return ""
	}
	return m[name]
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown: CONFIG GET refused)"
	}
	return s
}

// permanent is dlm.Permanent for an error of doctor's own go-redis
// clients, whose error replies are mapped as a driver maps them.
func permanent(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		err = nodekit.Reply(re.Error(), err)
	}
	return dlm.Permanent(err)
}

// versionFinding is doctor's finding on a server's version (redis_version
// of its INFO): dlm needs Redis 6.0 or later, whose SET takes KEEPTTL (the
// acquire script's first call on an older server fails with an error
// saying so), and wait_aof needs 7.2.
func versionFinding(version string, cfg config.Config) finding {
	major, minor := versionParts(version)
	switch {
	case version == "":
		return finding{"warn", "the server does not report its version (redis_version): dlm needs Redis 6.0 or later"}
	case major < 6:
		return finding{"fail", fmt.Sprintf("Redis %s: dlm needs Redis 6.0 or later (SET KEEPTTL); locks cannot be taken here", version)}
	case major < 7 || major == 7 && minor < 2:
		level := "ok"
		if cfg.WaitAOF != "" {
			level = "fail"
		}
		return finding{level, fmt.Sprintf("Redis %s (WAITAOF, which wait_aof uses, needs 7.2 or later)", version)}
	}
	return finding{"ok", "Redis " + version}
}

// hasWaitAOF reports whether the server's version, from its INFO, has
// WAITAOF (7.2 and later).
func hasWaitAOF(info map[string]string) bool {
	major, minor := versionParts(info["redis_version"])
	return major > 7 || major == 7 && minor >= 2
}

func hasCommand(ctx context.Context, c *redis.Client, name string) bool {
	res, err := c.Do(ctx, "COMMAND", "INFO", name).Slice()
	return err == nil && len(res) == 1 && res[0] != nil
}

// replicaLag summarises the lag of the replicas in sync from INFO
// replication (checkReplicaStates reports the others).
func replicaLag(info map[string]string) string {
	var lags []string
	for _, rs := range replicaStates(info) {
		if rs.online() && rs.lag != "" {
			lags = append(lags, rs.lag+"s")
		}
	}
	if len(lags) == 0 {
		return ""
	}
	return ", lag " + strings.Join(lags, " ")
}
