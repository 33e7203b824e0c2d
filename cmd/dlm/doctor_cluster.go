package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/config"
)

// A clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string // master: the id of the master a replica follows
	flags            []string
	slots            []string // the slot ranges a master serves, e.g. "0-5460"
	linkUp           bool     // its cluster bus link, as the node asked sees it
}

func (n clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }

// parseClusterNodes reads the reply of CLUSTER NODES.
func parseClusterNodes(out string) []clusterNode {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@") // ip:port@cport[,hostname]
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), linkUp: f[7] == "connected"}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") { // [slot->-id]: a migration under way
				n.slots = append(n.slots, s)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// checkCluster asks the first seed node that answers for the Cluster's
// nodes and checks each master and replica: reachable, in the role the
// Cluster gives it, cluster_state ok and every slot served as it sees it,
// the findings of checkServer on masters and of checkReplica on replicas,
// and, for the failover strategy, each master's replicas against the ack
// policy.
func checkCluster(ctx context.Context, cfg config.Config, timeout time.Duration, r *report) {
	r.section("Cluster")
	var nodes []clusterNode
	var seedErrs []string // of the seeds that did not answer
	for _, seed := range cfg.Addrs {
		c := serverClient(cfg, seed)
		cctx, cancel := context.WithTimeout(ctx, timeout)
		out, err := c.ClusterNodes(cctx).Result()
		cancel()
		_ = c.Close()
		if err != nil {
			seedErrs = append(seedErrs, fmt.Sprintf("%s: CLUSTER NODES: %v", seed, err))
			continue
		}
		nodes = parseClusterNodes(out)
		r.addf("ok", "%s: %d node(s) known", seed, len(nodes))
		break
	}
	if len(nodes) == 0 {
		for _, e := range seedErrs {
			r.addf("fail", "%s", e)
		}
		r.addf("fail", "no listed node gave the Cluster's nodes: check the addresses, the password and that they are Cluster nodes")
		return
	}
	for _, e := range seedErrs {
		// Clients try the next seed: the Cluster's own view, below, says
		// whether a node it counts is down.
		r.addf("ok", "%s (another listed node answered; clients try the next)", e)
	}
	var masters, replicas []clusterNode
	for _, n := range nodes {
		switch {
		case n.has("master") && len(n.slots) > 0:
			masters = append(masters, n)
		case n.has("slave") || n.has("replica"):
			replicas = append(replicas, n)
		case n.has("master"):
			r.addf("warn", "%s: a master without slots: it holds no locks", n.addr)
		}
		if down(n) {
			level := "warn" // a replica, or a master without slots: less redundancy
			if n.has("master") && len(n.slots) > 0 {
				level = "fail"
			}
			r.addf(level, "%s: flagged %s by the Cluster", n.addr, strings.Join(n.flags, ","))
		}
	}
	r.addf("ok", "%d master(s) with slots, %d replica(s)", len(masters), len(replicas))
	slices.SortFunc(masters, func(a, b clusterNode) int { return strings.Compare(a.addr, b.addr) })
	for _, m := range masters {
		r.section(fmt.Sprintf("%s (master, slots %s)", m.addr, strings.Join(m.slots, " ")))
		info := checkClusterNode(ctx, cfg, m.addr, "master", timeout, r)
		if cfg.Strategy == "failover" && info != nil {
			checkAcks(cfg, info, r)
		}
		for _, rep := range replicas {
			if rep.master == m.id {
				r.section(fmt.Sprintf("%s (replica of %s)", rep.addr, m.addr))
				if down(rep) {
					r.addf("warn", "down (flagged %s): %s has one successor fewer", strings.Join(rep.flags, ","), m.addr)
					continue
				}
				checkClusterNode(ctx, cfg, rep.addr, "replica", timeout, r)
			}
		}
	}
	for _, rep := range replicas {
		if !slices.ContainsFunc(masters, func(m clusterNode) bool { return m.id == rep.master }) {
			r.section(rep.addr + " (replica)")
			r.addf("fail", "replicates %s, which serves no slots", rep.master)
			checkClusterNode(ctx, cfg, rep.addr, "replica", timeout, r)
		}
	}
}

// down reports whether the Cluster flags n as failing.
func down(n clusterNode) bool { return n.has("fail") || n.has("fail?") }

// checkClusterNode checks one node of a Cluster in the role the Cluster
// gives it, and returns its INFO, or nil when it could not be read.
func checkClusterNode(ctx context.Context, cfg config.Config, addr, role string, timeout time.Duration, r *report) map[string]string {
	c := serverClient(cfg, addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var info map[string]string
	if role == "master" {
		info = checkServer(ctx, c, cfg, r)
	} else {
		info = checkReplica(ctx, c, cfg, r)
	}
	if info == nil {
		return nil
	}
	checkClusterInfo(ctx, c, r)
	return info
}

// checkClusterInfo reports the node's view of the Cluster: its state and
// the slots served.
func checkClusterInfo(ctx context.Context, c *redis.Client, r *report) {
	raw, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		r.addf("fail", "CLUSTER INFO: %v", err)
		return
	}
	ci := parseInfo(raw)
	if st := ci["cluster_state"]; st != "ok" {
		r.addf("fail", "cluster_state %s: this node refuses every command (CLUSTERDOWN) until the Cluster is whole again", orUnknown(st))
	} else {
		r.addf("ok", "cluster_state ok")
	}
	switch slotsOK := ci["cluster_slots_ok"]; {
	case slotsOK == "16384":
		r.addf("ok", "all 16384 slots served")
	case ci["cluster_slots_assigned"] != "16384":
		r.addf("fail", "%s of 16384 slots assigned: locks on the others are refused; assign them (redis-cli --cluster fix)", orUnknown(ci["cluster_slots_assigned"]))
	default:
		r.addf("fail", "%s of 16384 slots served (%s in a failing master's hands): locks on the others are refused until a replica takes over",
			orUnknown(slotsOK), ci["cluster_slots_fail"])
	}
}
