package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// A server is one redis-server or redis-sentinel process on a host of its
// own, started by internal/redistest's launcher in the host's namespace.
type server struct {
	host *Host
	port int
	dir  string
	cfg  redistest.Config
	srv  *redistest.Server // nil until the first start
	// clock is the server's wall clock, when the nemesis moves it; nil
	// otherwise.
	clock *redistest.Clock
}

func (s *server) addr() string { return fmt.Sprintf("%s:%d", s.host.IP, s.port) }

// start starts the process (again, on the same port and directory) and
// waits until it answers PING.
func (s *server) start() error {
	var err error
	if s.srv == nil {
		s.srv, err = redistest.Launch(s.cfg)
	} else {
		err = s.srv.Relaunch()
	}
	if err != nil {
		return fmt.Errorf("faults: %s on %s: %w", filepath.Base(s.cfg.Bin), s.host.Name, err)
	}
	return nil
}

// up reports whether the process runs (it may be stopped by SIGSTOP).
func (s *server) up() bool { return s.srv != nil && s.srv.Running() }

func (s *server) signal(sig syscall.Signal) {
	if s.srv != nil {
		_ = s.srv.Signal(sig)
	}
}

// kill ends the process with SIGKILL (a stopped one too) and waits until
// it is gone.
func (s *server) kill() {
	if s.srv != nil {
		s.srv.Stop()
	}
}

// wipe deletes the server's files: a restart then starts empty.
func (s *server) wipe() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != "redis.log" && !strings.HasSuffix(e.Name(), ".conf") {
			if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// A topology is the deployment of one strategy: the servers that hold
// locks (Data: the Redlock masters, the one server, or the primary first
// and then its replicas), the Sentinels, and the URL clients open.
type topology struct {
	Strategy  string
	Data      []*server
	Sentinels []*server
	URL       string
	// proxies, when the clients go through them, are proxies in the
	// runner's namespace, one in front of each data server.
	proxies []*redistest.Proxy
}

// Strategies the suite knows, as topologies to start. A "-guard" suffix
// turns the amnesia guard on (max_ttl, strategy.WithMaxTTL, set to the TTL).
var strategies = []string{"single", "redlock", "failover-ack-all", "failover-ack-none", "cluster", "single-guard", "redlock-guard"}

// unguarded returns strategy without its "-guard" suffix.
func unguarded(strategy string) string { return strings.TrimSuffix(strategy, "-guard") }

// startTopology starts strategy's servers on hosts of n, files in dir; with
// persist, every data server writes an append-only file and fsyncs it on
// every write; with proxied (single and redlock only), the clients reach
// each data server through a proxy in this process; with clocked, each data
// server has a wall clock of its own (server.clock), at real time.
func startTopology(n *Net, dir, strategy string, persist, proxied, clocked bool, ttl time.Duration) (*topology, error) {
	t := &topology{Strategy: strategy}
	data := []string{"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"}
	if persist {
		data = []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0"}
	}
	h := &hosting{n: n, dir: dir, clocked: clocked}
	var err error
	switch unguarded(strategy) {
	case "single", "redlock":
		err = t.startMasters(h, data, proxied, ttl)
	case "failover-ack-all", "failover-ack-none":
		err = t.startFailover(h, data, ttl)
	case "cluster":
		err = t.startCluster(h, data, ttl)
	default:
		err = fmt.Errorf("faults: unknown strategy %q (known: %s)", strategy, strings.Join(strategies, ", "))
	}
	return t, err
}

// hosting starts servers on hosts of n, files in dir.
type hosting struct {
	n       *Net
	dir     string
	clocked bool // each redis-server has a wall clock of its own
}

// add starts bin on a new host name, listening on port, with conf and args.
func (hs *hosting) add(name, bin string, port int, conf string, args ...string) (*server, error) {
	h, err := hs.n.AddHost(name)
	if err != nil {
		return nil, err
	}
	d := filepath.Join(hs.dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	s := &server{host: h, port: port, dir: d, cfg: redistest.Config{
		Bin: bin, Dir: d, Host: h.IP, Ports: []int{port}, Conf: conf, Args: args, Command: h.Command,
	}}
	if hs.clocked && bin == "redis-server" {
		// In dir, not d: a wipe empties d, and a restarted server
		// must find its clock.
		if s.clock, err = redistest.NewClock(hs.dir); err != nil {
			return nil, err
		}
		s.cfg.Clock = s.clock
	}
	return s, s.start()
}

// startMasters starts single's one server or redlock's five, each behind a
// proxy if proxied, and sets t's URL.
func (t *topology) startMasters(h *hosting, data []string, proxied bool, ttl time.Duration) error {
	var addrs []string
	count := 1
	if unguarded(t.Strategy) == "redlock" {
		count = 5
	}
	for i := range count {
		s, err := h.add(fmt.Sprintf("r%d", i+1), "redis-server", 6379, "", data...)
		if err != nil {
			return err
		}
		t.Data = append(t.Data, s)
		addr := s.addr()
		if proxied {
			p, err := redistest.NewProxy(net.JoinHostPort(h.n.Runner, "0"), addr)
			if err != nil {
				return err
			}
			t.proxies = append(t.proxies, p)
			addr = p.Addr
		}
		addrs = append(addrs, addr)
	}
	t.URL = fmt.Sprintf("%s://%s?ttl=%v", unguarded(t.Strategy), strings.Join(addrs, ","), ttl)
	if t.Strategy != unguarded(t.Strategy) {
		t.URL += fmt.Sprintf("&max_ttl=%v", ttl)
	}
	return nil
}

// startFailover starts a primary, its 2 replicas (waiting until both are
// online) and 3 Sentinels monitoring it, and sets t's URL.
func (t *topology) startFailover(h *hosting, data []string, ttl time.Duration) error {
	var addrs []string
	p, err := h.add("primary", "redis-server", 6379, "", data...)
	if err != nil {
		return err
	}
	t.Data = append(t.Data, p)
	for i := range 2 {
		r, err := h.add(fmt.Sprintf("replica%d", i+1), "redis-server", 6379, "", append(data, "--replicaof", p.host.IP, "6379")...)
		if err != nil {
			return err
		}
		t.Data = append(t.Data, r)
	}
	if err := waitReplicas(p, 2); err != nil {
		return err
	}
	for i := range 3 {
		conf := fmt.Sprintf("sentinel monitor dlmf %s 6379 2\nsentinel down-after-milliseconds dlmf 1000\n"+
			"sentinel failover-timeout dlmf 3000\nsentinel parallel-syncs dlmf 2\n", p.host.IP)
		s, err := h.add(fmt.Sprintf("sentinel%d", i+1), "redis-sentinel", 26379, conf)
		if err != nil {
			return err
		}
		t.Sentinels = append(t.Sentinels, s)
		addrs = append(addrs, s.addr())
	}
	ack := strings.TrimPrefix(t.Strategy, "failover-ack-")
	t.URL = fmt.Sprintf("sentinel://%s/dlmf?ack=%s&replicas=2&wait_timeout=%v&ttl=%v", strings.Join(addrs, ","), ack, ttl/4, ttl)
	return nil
}

// startCluster starts 3 masters and 3 replicas, forms them into a Cluster
// and sets t's URL.
func (t *topology) startCluster(h *hosting, data []string, ttl time.Duration) error {
	var addrs []string
	args := append(data, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000", "--cluster-config-file", "nodes.conf")
	var masters []*server
	for i := range 3 {
		m, err := h.add(fmt.Sprintf("master%d", i+1), "redis-server", 6379, "", args...)
		if err != nil {
			return err
		}
		masters = append(masters, m)
		addrs = append(addrs, m.addr())
	}
	var replicas []*server
	for i := range 3 {
		r, err := h.add(fmt.Sprintf("replica%d", i+1), "redis-server", 6379, "", args...)
		if err != nil {
			return err
		}
		replicas = append(replicas, r)
	}
	if err := formCluster(masters, replicas); err != nil {
		return err
	}
	t.Data = append(masters, replicas...)
	t.URL = fmt.Sprintf("cluster://%s?ttl=%v", strings.Join(addrs, ","), ttl)
	return nil
}

// formCluster makes masters[i] serve the i-th third of the slots and
// replicas[i] replicate it, and waits until every node says the cluster is
// ok and each master has its replica online.
func formCluster(masters, replicas []*server) error {
	ctx := context.Background()
	all := append(append([]*server{}, masters...), replicas...)
	do := func(s *server, args ...any) error {
		c := redis.NewClient(&redis.Options{Addr: s.addr()})
		defer c.Close()
		return c.Do(ctx, args...).Err()
	}
	for i, m := range masters {
		if err := do(m, "CLUSTER", "ADDSLOTSRANGE", i*16384/3, (i+1)*16384/3-1); err != nil {
			return err
		}
	}
	for _, s := range all[1:] {
		if err := do(s, "CLUSTER", "MEET", all[0].host.IP, 6379); err != nil {
			return err
		}
	}
	for i, r := range replicas {
		mc := redis.NewClient(&redis.Options{Addr: masters[i].addr()})
		id, err := mc.ClusterMyID(ctx).Result()
		_ = mc.Close()
		if err != nil {
			return err
		}
		if err := until(20*time.Second, func() bool { return do(r, "CLUSTER", "REPLICATE", id) == nil }); err != nil {
			return fmt.Errorf("faults: %s replicating %s: %w", r.addr(), masters[i].addr(), err)
		}
	}
	err := until(30*time.Second, func() bool {
		for _, s := range all {
			c := redis.NewClient(&redis.Options{Addr: s.addr()})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("faults: cluster not ok: %w", err)
	}
	for _, m := range masters {
		if err := waitReplicas(m, 1); err != nil {
			return err
		}
	}
	return nil
}

// until calls f every 50ms until it reports true, for at most d.
func until(d time.Duration, f func() bool) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if f() {
			return nil
		}
	}
	return fmt.Errorf("not within %v", d)
}

// waitReplicas waits until primary p has n replicas online.
func waitReplicas(p *server, n int) error {
	c := redis.NewClient(&redis.Options{Addr: p.addr()})
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Count(info, ",state=online,") == n {
			return nil
		}
	}
	return fmt.Errorf("faults: %s: %d replicas not online", p.addr(), n)
}

// slow delays the replies of data server i's proxy by latency plus up to
// jitter more, at random; zeros remove the delay.
func (t *topology) slow(i int, latency, jitter time.Duration) error {
	t.proxies[i].SetLatency(latency, jitter)
	return nil
}

// stop kills every process of the topology.
func (t *topology) stop() {
	for _, p := range t.proxies {
		p.Close()
	}
	for _, s := range append(t.Data, t.Sentinels...) {
		s.kill()
		if s.clock != nil {
			_ = s.clock.Close()
		}
	}
}

// lockKey is the Redis key of the clients' lock.
func lockKey() string {
	lock, _ := strategy.Keys(clientKey)
	return lock
}

// keyMaster returns the data server that serves the lock's slot now.
func (t *topology) keyMaster() *server {
	for _, s := range t.Data[:3] {
		if !s.up() {
			continue
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.addr()}, MaxRetries: -1})
		m, err := c.MasterForKey(context.Background(), lockKey())
		var addr string
		if err == nil {
			addr = m.Options().Addr
		}
		_ = c.Close()
		for _, d := range t.Data {
			if d.addr() == addr {
				return d
			}
		}
	}
	return nil
}

// replicaOf returns a data server that replicates m.
func (t *topology) replicaOf(m *server) *server {
	for _, s := range t.Data {
		if s == m || !s.up() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.addr()})
		role, err := c.Do(context.Background(), "ROLE").Slice()
		_ = c.Close()
		if err == nil && len(role) > 1 && role[0] == "slave" && fmt.Sprint(role[1]) == m.host.IP {
			return s
		}
	}
	return t.Data[3]
}

// migrateKeySlot moves the lock's slot from its master to the next master,
// with 200 keys of data, as redis-cli's resharding does.
func (t *topology) migrateKeySlot() (from, to string, err error) {
	ctx := context.Background()
	src := t.keyMaster()
	if src == nil {
		return "", "", fmt.Errorf("faults: no master for the key")
	}
	var dst *server
	for _, s := range t.Data {
		if s != src && s.up() && t.isMaster(s) {
			dst = s
			break
		}
	}
	if dst == nil {
		return "", "", fmt.Errorf("faults: no other master")
	}
	sc := redis.NewClient(&redis.Options{Addr: src.addr()})
	defer sc.Close()
	dc := redis.NewClient(&redis.Options{Addr: dst.addr()})
	defer dc.Close()
	slot, err := sc.ClusterKeySlot(ctx, lockKey()).Result()
	if err != nil {
		return "", "", err
	}
	tag := lockKey()[strings.IndexByte(lockKey(), '{'):]
	for i := range 200 {
		if err := sc.Set(ctx, fmt.Sprintf("%sdata%d", tag, i), "x", 0).Err(); err != nil {
			return "", "", err
		}
	}
	srcID, err := sc.ClusterMyID(ctx).Result()
	if err != nil {
		return "", "", err
	}
	dstID, err := dc.ClusterMyID(ctx).Result()
	if err != nil {
		return "", "", err
	}
	if err := dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return "", "", err
	}
	if err := sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return "", "", err
	}
	for {
		keys, err := sc.ClusterGetKeysInSlot(ctx, int(slot), 10).Result()
		if err != nil {
			return "", "", err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", dst.host.IP, dst.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := sc.Do(ctx, args...).Err(); err != nil {
			return "", "", err
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []*redis.Client{dc, sc} {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
			return "", "", err
		}
	}
	for _, s := range t.Data {
		if s != src && s != dst && s.up() && t.isMaster(s) {
			c := redis.NewClient(&redis.Options{Addr: s.addr()})
			_ = c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
			_ = c.Close()
		}
	}
	return src.host.Name, dst.host.Name, nil
}

func (t *topology) isMaster(s *server) bool {
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	defer c.Close()
	role, err := c.Do(context.Background(), "ROLE").Slice()
	return err == nil && len(role) > 0 && role[0] == "master"
}
