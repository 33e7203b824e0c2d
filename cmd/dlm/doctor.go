package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const doctorUsage = `usage: dlm doctor [flags]

Checks every server of the configured deployment for what makes locks unsafe
or slow, and says what to change. Exit status: 0 when nothing needs changing,
1 when something does, 2 on usage errors.

flags:
`

// A finding is one line of the doctor's report.
type finding struct {
	level string // "ok", "warn" or "fail"
	text  string
}

func doctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage); fs.PrintDefaults() }
	tf := addTargetFlags(fs)
	timeout := fs.Duration("timeout", 2*time.Second, "bound on each server's checks")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := tf.load()
	if err != nil {
		fmt.Fprintln(stderr, "dlm doctor:", err)
		return 2
	}
	t, err := connect(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "dlm doctor:", err)
		return 2
	}
	defer t.Close()

	fmt.Fprintf(stdout, "dlm doctor: %s strategy over %d server(s)\n", cfg.Strategy, len(t.clients))
	problems := 0
	for i, c := range t.clients {
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		fmt.Fprintf(stdout, "\n%s\n", cfg.Addrs[i])
		for _, f := range checkServer(cctx, c, cfg.Strategy) {
			fmt.Fprintf(stdout, "  %-4s %s\n", f.level, f.text)
			if f.level != "ok" {
				problems++
			}
		}
		cancel()
	}
	if problems > 0 {
		fmt.Fprintf(stdout, "\n%d thing(s) to change\n", problems)
		return 1
	}
	fmt.Fprintln(stdout, "\nnothing to change")
	return 0
}

// checkServer inspects one server.
func checkServer(ctx context.Context, c redis.UniversalClient, strat string) []finding {
	var out []finding
	add := func(level, format string, args ...any) {
		out = append(out, finding{level, fmt.Sprintf(format, args...)})
	}

	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		add("fail", "unreachable: %v", err)
		return out
	}
	add("ok", "reachable, PING in %v", time.Since(start).Round(10*time.Microsecond))

	raw, err := c.Info(ctx, "server", "memory", "persistence", "replication", "cluster").Result()
	if err != nil {
		add("fail", "INFO failed: %v", err)
		return out
	}
	info := parseInfo(raw)

	version := info["redis_version"]
	major, minor := versionParts(version)
	switch {
	case major < 6:
		add("warn", "Redis %s: below 6.0 there is no client tracking, so waiters poll; upgrade to 7.2 or later", version)
	case major < 7 || major == 7 && minor < 2:
		add("ok", "Redis %s (WAITAOF needs 7.2 or later)", version)
	default:
		add("ok", "Redis %s", version)
	}

	switch p := info["maxmemory_policy"]; {
	case p == "noeviction":
		add("ok", "maxmemory-policy noeviction: lock keys and fencing counters are never evicted")
	case p == "":
		add("warn", "maxmemory-policy unknown; set it to noeviction")
	default:
		add("warn", "maxmemory-policy %s can evict lock keys (they have TTLs) or fencing counters: a second owner could take a held lock; set maxmemory-policy noeviction, or keep locks on a server without maxmemory", p)
	}

	aof := info["aof_enabled"] == "1"
	fsync := configGet(ctx, c, "appendfsync")
	switch {
	case aof && fsync == "always":
		add("ok", "AOF on with appendfsync always: locks and fencing counters survive a restart")
	case aof:
		add("warn", "AOF on with appendfsync %s: a crash can lose the last writes, and with them held locks and fence increments; set appendfsync always (or delay restarts by the longest TTL)", orUnknown(fsync))
	default:
		add("warn", "AOF off: a restart loses every lock and resets fencing counters; set appendonly yes and appendfsync always (or delay restarts by the longest TTL and never reuse fences across restarts)")
	}

	role := info["role"]
	replicas, _ := strconv.Atoi(info["connected_slaves"])
	switch {
	case role == "slave" || role == "replica":
		add("fail", "this server is a replica (read-only); locks must be taken on a primary")
	case strat == "failover" && replicas == 0:
		add("warn", "no connected replicas: WAIT cannot protect locks against a failover")
	case strat == "failover":
		add("ok", "%d connected replica(s)%s", replicas, replicaLag(info, replicas))
	case strat == "redlock" && replicas > 0:
		add("warn", "%d replica(s): Redlock wants independent masters; a failover to a replica that missed a write breaks the quorum's guarantee", replicas)
	case replicas > 0:
		add("warn", "%d replica(s): replication is asynchronous, a failover can lose a held lock; consider the failover strategy", replicas)
	default:
		add("ok", "no replicas")
	}

	if info["cluster_enabled"] == "1" {
		add("ok", "Cluster mode: each lock and its fencing counter share a hash slot")
	}

	for _, cmd := range []string{"wait", "waitaof", "client"} {
		if !hasCommand(ctx, c, cmd) {
			level := "ok"
			if cmd == "wait" && strat == "failover" {
				level = "fail"
			}
			add(level, "command %s not available", strings.ToUpper(cmd))
		}
	}
	return out
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

func configGet(ctx context.Context, c redis.UniversalClient, name string) string {
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

func hasCommand(ctx context.Context, c redis.UniversalClient, name string) bool {
	res, err := c.Do(ctx, "COMMAND", "INFO", name).Slice()
	return err == nil && len(res) == 1 && res[0] != nil
}

// replicaLag summarises the replicas' lag from INFO replication.
func replicaLag(info map[string]string, n int) string {
	var lags []string
	for i := range n {
		for _, kv := range strings.Split(info["slave"+strconv.Itoa(i)], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "lag" {
				lags = append(lags, v+"s")
			}
		}
	}
	if len(lags) == 0 {
		return ""
	}
	return ", lag " + strings.Join(lags, " ")
}
