package faults

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A nemesis injects one kind of fault again and again during a run: fault
// starts it and returns a description and the function that ends it.
type nemesis struct {
	Name string
	Doc  string
	// persist makes the data servers fsync an append-only file on every write.
	persist bool
	// proxied puts a proxy (in the runner) in front of each data server.
	proxied bool
	// clocked gives each data server a wall clock of its own that the
	// fault moves (redistest.Clock).
	clocked bool
	// onHolder: the fault picks the holder itself; other faults strike
	// while a client is in a long hold.
	onHolder bool
	// applies reports whether the nemesis makes sense for a strategy.
	applies func(strategy string) bool
	// fault starts the fault; the run records its Fault and Heal events.
	fault func(r *run) (desc string, heal func(), err error)
	// hold is how long the fault lasts before heal, given the lease TTL.
	hold func(ttl time.Duration) time.Duration
}

func always(string) bool { return true }

func notFailover(s string) bool { return !strings.HasPrefix(s, "failover") }

func independent(s string) bool { s = unguarded(s); return s == "single" || s == "redlock" }

// minority and majority return the data servers a fault takes: of Redlock's
// five masters two or three; the one server of single; the primary of
// failover (a majority: without it nothing is granted) or one replica.
// On a Cluster, the key's master and its replica.
func minority(t *topology) []*server {
	switch {
	case strings.HasPrefix(t.Strategy, "failover"):
		return t.Data[1:2]
	case t.Strategy == "cluster":
		m := t.keyMaster()
		return []*server{t.replicaOf(m)}
	}
	return t.Data[:(len(t.Data)-1)/2]
}

func majority(t *topology) []*server {
	switch {
	case strings.HasPrefix(t.Strategy, "failover"):
		return t.Data[:1]
	case t.Strategy == "cluster":
		return []*server{t.keyMaster()}
	}
	return t.Data[:len(t.Data)/2+1]
}

func names(ss []*server) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.host.Name)
	}
	return strings.Join(out, ",")
}

func ips(ss []*server) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.host.IP)
	}
	return out
}

func fixed(d time.Duration) func(time.Duration) time.Duration {
	return func(time.Duration) time.Duration { return d }
}

func ttls(k float64) func(time.Duration) time.Duration {
	return func(ttl time.Duration) time.Duration { return time.Duration(k * float64(ttl)) }
}

func stop(ss []*server) (func(), error) {
	for _, s := range ss {
		s.signal(syscall.SIGSTOP)
	}
	return func() {
		for _, s := range ss {
			s.signal(syscall.SIGCONT)
		}
	}, nil
}

// killRestart kills ss with SIGKILL and restarts them, empty when wipe is
// set: at once, or when the fault heals when later is set.
func killRestart(ss []*server, wipe, later bool) (func(), error) {
	for _, s := range ss {
		s.kill()
		if wipe {
			if err := s.wipe(); err != nil {
				return nil, err
			}
		}
	}
	restart := func() {
		for _, s := range ss {
			if err := s.start(); err != nil {
				panic(err) // the run cannot go on without its servers
			}
		}
	}
	if later {
		return restart, nil
	}
	restart()
	return func() {}, nil
}

// nemeses are the faults the suite knows, in the matrix' order.
var nemeses = []*nemesis{
	{Name: "none", Doc: "no fault", applies: always,
		fault: func(*run) (string, func(), error) { return "", nil, nil }, hold: fixed(0)},
	{Name: "stop-minority", Doc: "SIGSTOP a minority of the servers (2 of 5 Redlock masters; a replica) for 2s",
		applies: func(s string) bool { return unguarded(s) != "single" },
		fault: func(r *run) (string, func(), error) {
			ss := minority(r.topo)
			h, err := stop(ss)
			return "SIGSTOP " + names(ss), h, err
		}, hold: fixed(2 * time.Second)},
	{Name: "stop-majority", Doc: "SIGSTOP a majority (3 of 5 masters; the one server; the primary) for 2s", applies: always,
		fault: func(r *run) (string, func(), error) {
			ss := majority(r.topo)
			h, err := stop(ss)
			return "SIGSTOP " + names(ss), h, err
		}, hold: fixed(2 * time.Second)},
	{Name: "kill-fsync", Doc: "kill -9 a majority and restart it at once; appendfsync always", persist: true, applies: notFailover,
		fault: func(r *run) (string, func(), error) {
			ss := majority(r.topo)
			h, err := killRestart(ss, false, false)
			return "kill -9 and restart " + names(ss), h, err
		}, hold: fixed(0)},
	{Name: "kill-empty", Doc: "kill -9 a majority and restart it at once without its data (no persistence)", applies: always,
		fault: func(r *run) (string, func(), error) {
			ss := majority(r.topo)
			h, err := killRestart(ss, true, false)
			return "kill -9 and restart empty " + names(ss), h, err
		}, hold: fixed(0)},
	{Name: "kill-delayed", Doc: "kill -9 a majority and restart it without its data after the TTL plus 1s", applies: independent,
		fault: func(r *run) (string, func(), error) {
			ss := majority(r.topo)
			h, err := killRestart(ss, true, true)
			return "kill -9 " + names(ss) + ", restart empty later", h, err
		}, hold: func(ttl time.Duration) time.Duration { return ttl + time.Second }},
	{Name: "pause-holder", Doc: "SIGSTOP the client holding the lock for 2.5 TTLs", applies: always, onHolder: true,
		fault: func(r *run) (string, func(), error) {
			c := r.holder()
			if c == nil {
				return "", nil, nil
			}
			c.cmd.Process.Signal(syscall.SIGSTOP)
			return fmt.Sprintf("SIGSTOP client %d", c.id), func() { c.cmd.Process.Signal(syscall.SIGCONT) }, nil
		}, hold: ttls(2.5)},
	{Name: "partition-holder", Doc: "cut the client holding the lock off from every server (not from the register) for 2.5 TTLs", applies: always, onHolder: true,
		fault: func(r *run) (string, func(), error) {
			c := r.holder()
			if c == nil {
				return "", nil, nil
			}
			err := r.net.Partition([]string{c.host.IP}, ips(append(r.topo.Data, r.topo.Sentinels...)))
			return fmt.Sprintf("partition client %d", c.id), func() { _ = r.net.Heal() }, err
		}, hold: ttls(2.5)},
	{Name: "partition-majority", Doc: "cut a majority of the servers off from every client for 2s", applies: always,
		fault: func(r *run) (string, func(), error) {
			ss := majority(r.topo)
			err := r.net.Partition(ips(ss), r.clientIPs())
			return "partition " + names(ss), func() { _ = r.net.Heal() }, err
		}, hold: fixed(2 * time.Second)},
	{Name: "lossy-majority", Doc: "drop 20% of the packets to and from a majority of the servers (nftables in the router) for 3s", applies: always,
		fault: func(r *run) (string, func(), error) {
			ss := majority(r.topo)
			err := r.net.Loss(ips(ss), 20)
			return "20% loss " + names(ss), func() { _ = r.net.Heal() }, err
		}, hold: fixed(3 * time.Second)},
	{Name: "slow-minority", Doc: "replies of a minority (2 of 5 masters) delayed 0-150ms for 3s", proxied: true,
		applies: func(s string) bool { return unguarded(s) == "redlock" },
		fault: func(r *run) (string, func(), error) {
			return slowDown(r, len(r.topo.Data)/2)
		}, hold: fixed(3 * time.Second)},
	{Name: "slow-majority", Doc: "replies of a majority (3 of 5 masters; the one server) delayed 0-150ms for 3s", proxied: true,
		applies: independent,
		fault: func(r *run) (string, func(), error) {
			return slowDown(r, len(r.topo.Data)/2+1)
		}, hold: fixed(3 * time.Second)},
	{Name: "clock-jump", Doc: "one server's wall clock (the one server; 1 of 5 masters; the primary; the key's master) jumps 2 TTLs forward while a lock is held, and stays ahead", clocked: true, applies: always,
		fault: func(r *run) (string, func(), error) {
			s := r.oneServer()
			s.clock.Jump(2 * r.cell.TTL)
			return fmt.Sprintf("%s's clock jumps %v forward (now %v ahead)", s.host.Name, 2*r.cell.TTL, s.clock.Offset().Round(time.Millisecond)), func() {}, nil
		}, hold: ttls(1)},
	{Name: "clock-drift", Doc: fmt.Sprintf("the clocks of a minority (2 of 5 masters) run fast, %v× and %v×, for 5s", minorityRates[0], minorityRates[1]), clocked: true,
		applies: func(s string) bool { return unguarded(s) == "redlock" },
		fault: func(r *run) (string, func(), error) {
			return drift(minority(r.topo), minorityRates...)
		}, hold: fixed(5 * time.Second)},
	{Name: "clock-drift-within", Doc: fmt.Sprintf("the clocks of a majority (the one server; 3 of 5 masters; the primary; the key's master) run %v× fast for 5s: within the drift margin (1/(1-0.01-2ms/TTL) = 1.0121× at TTL 1s)", withinRate), clocked: true, applies: always,
		fault: func(r *run) (string, func(), error) {
			return drift(majority(r.topo), withinRate)
		}, hold: fixed(5 * time.Second)},
	{Name: "clock-drift-beyond", Doc: fmt.Sprintf("the clocks of a majority run %v× fast for 5s: beyond the drift margin", beyondRate), clocked: true, applies: always,
		fault: func(r *run) (string, func(), error) {
			return drift(majority(r.topo), beyondRate)
		}, hold: fixed(5 * time.Second)},
	{Name: "cluster-failover", Doc: "kill -9 the master of the key's slot; its replica takes over; the old master restarts as a replica",
		applies: func(s string) bool { return s == "cluster" }, fault: clusterFailover, hold: fixed(0)},
	{Name: "slot-migration", Doc: "move the key's slot (and 200 keys of data in it) to another master, 10 keys every 20ms",
		applies: func(s string) bool { return s == "cluster" },
		fault: func(r *run) (string, func(), error) {
			from, to, err := r.topo.migrateKeySlot()
			return fmt.Sprintf("slot moved from %s to %s", from, to), func() {}, err
		}, hold: fixed(0)},
	{Name: "failover", Doc: "once the Sentinels agree on the primary and both replicas follow it, kill -9 the primary; the Sentinels promote a replica; the old primary restarts, once a replica was promoted, and the Sentinels make it a replica",
		applies: func(s string) bool { return strings.HasPrefix(s, "failover") },
		fault:   func(r *run) (string, func(), error) { return killPrimary(r, 0) }, hold: fixed(0)},
	{Name: "failover-lagging", Doc: "as failover, but the primary is first cut off from its replicas (not from clients or Sentinels) for 500ms, so the replica promoted lacks what the primary granted meanwhile: the failover race",
		applies: func(s string) bool { return strings.HasPrefix(s, "failover") },
		fault:   func(r *run) (string, func(), error) { return killPrimary(r, 500*time.Millisecond) }, hold: fixed(0)},
}

// combined returns the nemesis that strikes with several nemeses at once,
// named "a+b": their faults start together (those that pick the holder
// first, as they wait for one) and heal together after the longest hold.
// Nil when a part is unknown, none, or repeated.
func combined(name string) *nemesis {
	var parts []*nemesis
	for _, p := range strings.Split(name, "+") {
		n := findNemesis(p)
		if n == nil || n.Name == "none" || slices.Contains(parts, n) {
			return nil
		}
		parts = append(parts, n)
	}
	slices.SortStableFunc(parts, func(a, b *nemesis) int {
		switch {
		case a.onHolder == b.onHolder:
			return 0
		case a.onHolder:
			return -1
		}
		return 1
	})
	c := &nemesis{Name: name}
	var docs []string
	for _, p := range parts {
		docs = append(docs, p.Doc)
		c.persist, c.proxied, c.onHolder = c.persist || p.persist, c.proxied || p.proxied, c.onHolder || p.onHolder
		c.clocked = c.clocked || p.clocked
	}
	c.Doc = "at once: " + strings.Join(docs, "; ")
	c.applies = func(s string) bool {
		for _, p := range parts {
			if !p.applies(s) {
				return false
			}
		}
		return true
	}
	c.hold = func(ttl time.Duration) time.Duration {
		var d time.Duration
		for _, p := range parts {
			d = max(d, p.hold(ttl))
		}
		return d
	}
	c.fault = func(r *run) (string, func(), error) {
		var descs []string
		var heals []func()
		healAll := func() {
			for i := len(heals) - 1; i >= 0; i-- {
				heals[i]()
			}
		}
		for _, p := range parts {
			desc, heal, err := p.fault(r)
			if err != nil || heal == nil {
				healAll() // all or nothing
				return "", nil, err
			}
			descs, heals = append(descs, desc), append(heals, heal)
		}
		return strings.Join(descs, " + "), healAll, nil
	}
	return c
}

// killPrimary kills the primary once the deployment settled; with lag, it
// first cuts the primary off from its replicas for that long. Heal waits
// until a replica took over, then restarts the old primary.
func killPrimary(r *run, lag time.Duration) (string, func(), error) {
	p := r.settled(30 * time.Second)
	if p == nil {
		r.record(Event{T: now(), Kind: Note, Info: "the deployment did not settle within 30s of the last failover: no kill this round"})
		return "", nil, nil
	}
	desc := "kill -9 primary " + p.host.Name
	if lag > 0 {
		var replicas []*server
		for _, s := range r.topo.Data {
			if s != p {
				replicas = append(replicas, s)
			}
		}
		if err := r.net.Partition([]string{p.host.IP}, ips(replicas)); err != nil {
			return "", nil, err
		}
		time.Sleep(lag)
		desc = fmt.Sprintf("cut primary %s off from its replicas for %v, then kill -9 it", p.host.Name, lag)
	}
	killed := time.Now()
	p.kill()
	if lag > 0 {
		if err := r.net.Heal(); err != nil {
			return "", nil, err
		}
	}
	return desc, func() {
		// Restarting a primary without persistence before a replica
		// took over would make its replicas copy its empty data set:
		// amnesia, not a failover. Sentinel may take several
		// election rounds (failover-timeout) after quick failovers.
		n := r.waitPromotion(p, time.Minute)
		if n == nil {
			r.record(Event{T: now(), Kind: Note, Info: fmt.Sprintf("no replica promoted within a minute of killing %s: it stays down", p.host.Name)})
			return
		}
		r.record(Event{T: now(), Kind: Note, Info: fmt.Sprintf("%s promoted %v after %s was killed", n.host.Name, time.Since(killed).Round(time.Millisecond), p.host.Name)})
		if err := p.start(); err != nil {
			panic(err)
		}
	}, nil
}

// clusterFailover kills the master of the key's slot; heal waits until its
// replica took over and restarts it, as a replica.
func clusterFailover(r *run) (string, func(), error) {
	m := r.topo.keyMaster()
	if m == nil {
		return "", nil, fmt.Errorf("faults: no master for the key")
	}
	m.kill()
	return "kill -9 master " + m.host.Name, func() {
		_ = until(15*time.Second, func() bool { k := r.topo.keyMaster(); return k != nil && k != m })
		if err := m.start(); err != nil {
			panic(err)
		}
	}, nil
}

// The clock nemeses' rates: a minority's (any rate keeps Redlock's promise),
// and a majority's within and beyond the drift margin that dlm takes off
// every lease by default (TTL×0.01 + 2ms: a server clock up to 1.0121× fast
// at TTL 1s).
var (
	minorityRates = []float64{1.5, 3}
	withinRate    = 1.01
	beyondRate    = 1.5
)

// oneServer returns the server whose clock clock-jump moves: the one
// server, the first Redlock master, the primary, the master of the key's
// slot.
func (r *run) oneServer() *server {
	switch {
	case r.topo.Strategy == "cluster":
		if m := r.topo.keyMaster(); m != nil {
			return m
		}
	case strings.HasPrefix(r.topo.Strategy, "failover"):
		if p := r.primary(); p != nil {
			return p
		}
	}
	return r.topo.Data[0]
}

// drift makes the clocks of ss run fast, ss[i] at rates[i] (the last rate
// for the rest); heal sets them back to real speed, as far ahead as they
// got.
func drift(ss []*server, rates ...float64) (string, func(), error) {
	var desc []string
	for i, s := range ss {
		rate := rates[min(i, len(rates)-1)]
		s.clock.SetRate(rate)
		desc = append(desc, fmt.Sprintf("%s %v×", s.host.Name, rate))
	}
	return "clocks fast: " + strings.Join(desc, ", "), func() {
		for _, s := range ss {
			s.clock.SetRate(1)
		}
	}, nil
}

// slowDown delays the replies of the first k data servers by 0-150ms.
func slowDown(r *run, k int) (string, func(), error) {
	for i := range k {
		if err := r.topo.slow(i, 0, 150*time.Millisecond); err != nil {
			return "", nil, err
		}
	}
	return "delay " + names(r.topo.Data[:k]), func() {
		for i := range k {
			_ = r.topo.slow(i, 0, 0)
		}
	}, nil
}

// primary returns the data server that reports the master role.
func (r *run) primary() *server {
	var addr string
	for _, s := range r.topo.Sentinels {
		c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, ReadTimeout: time.Second})
		a, err := c.Do(context.Background(), "SENTINEL", "get-master-addr-by-name", "dlmf").StringSlice()
		_ = c.Close()
		if err == nil && len(a) == 2 {
			addr = net.JoinHostPort(a[0], a[1])
			break
		}
	}
	for _, s := range r.topo.Data {
		if !s.up() || s.addr() != addr {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, ReadTimeout: time.Second})
		role, err := c.Do(context.Background(), "ROLE").Slice()
		_ = c.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return s
		}
	}
	return nil
}

// settled waits (up to d) until the deployment has settled after a
// failover and returns its primary, nil if it did not: every Sentinel names
// the same primary, which acts as one, and every other data server
// replicates it with its link up. Killing a primary before that tests
// Sentinel's handling of overlapping failovers, in which a Sentinel that
// has not yet heard of the last promotion may point a replica at an old
// primary (seen: a replica resynced from the killed primary restarted empty)
// and acknowledged writes are lost whatever the client waited for.
func (r *run) settled(d time.Duration) *server {
	ctx := context.Background()
	ask := func(s *server, args ...any) ([]any, error) {
		c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, ReadTimeout: time.Second})
		defer c.Close()
		return c.Do(ctx, args...).Slice()
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var addr string
		agree := true
		for _, s := range r.topo.Sentinels {
			a, err := ask(s, "SENTINEL", "get-master-addr-by-name", "dlmf")
			if err != nil || len(a) != 2 {
				agree = false
				break
			}
			got := net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1]))
			if addr != "" && got != addr {
				agree = false
			}
			addr = got
		}
		if !agree {
			continue
		}
		var primary *server
		followers := 0
		for _, s := range r.topo.Data {
			if !s.up() {
				continue
			}
			role, err := ask(s, "ROLE")
			switch {
			case err != nil || len(role) < 1:
			case s.addr() == addr && role[0] == "master":
				primary = s
			case role[0] == "slave" && len(role) >= 4 && net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) == addr && role[3] == "connected":
				followers++
			}
		}
		if primary != nil && followers == len(r.topo.Data)-1 {
			return primary
		}
	}
	return nil
}

// waitPromotion waits (up to d) until the Sentinels name another data
// server than old as the primary and it acts as one; nil if none did.
func (r *run) waitPromotion(old *server, d time.Duration) *server {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p := r.primary(); p != nil && p != old {
			return p
		}
	}
	return nil
}
