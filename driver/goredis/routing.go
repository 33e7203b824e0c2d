package goredis

// Where calls go: one server, or a Cluster's masters by hash slot, and a
// Cluster client's slot map reloaded after a failure a failover explains.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/nodekit"
)

// Routing implements nodekit.Router: one server for a *redis.Client (a
// failover client included), by hash slot for a *redis.ClusterClient,
// unknown for other kinds (a *redis.Ring shards by its own rules).
func (n *node) Routing() nodekit.Routing {
	switch n.c.(type) {
	case *redis.Client:
		return nodekit.RoutingOneServer
	case *redis.ClusterClient:
		return nodekit.RoutingBySlot
	}
	return nodekit.RoutingUnknown
}

// byMaster runs a Cluster batch as one pipeline per master, side by side,
// and reports whether it did (not when the calls live on one master): when
// one master stalls past the context, go-redis sets the error of a whole
// cluster pipeline on every command, and the replies of the others would
// be lost.
func (n *node) byMaster(ctx context.Context, cc *redis.ClusterClient, calls []driver.Call) bool {
	groups := map[string][]int{}
	for i := range calls {
		if len(calls[i].Keys) == 0 {
			return false
		}
		m, err := cc.MasterForKey(ctx, calls[i].Keys[0])
		if err != nil {
			return false
		}
		groups[m.Options().Addr] = append(groups[m.Options().Addr], i)
	}
	if len(groups) < 2 {
		return false
	}
	nodekit.RunGroups(calls, slices.Collect(maps.Values(groups)), func(part []driver.Call) { _, _ = n.bounded(ctx, part, nil) })
	return true
}

// pinned returns the client whose pipelines run on one connection to the
// server that holds the calls' keys.
func (n *node) pinned(ctx context.Context, calls []driver.Call) (*redis.Client, error) {
	switch c := n.c.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		if len(calls) == 0 || len(calls[0].Keys) == 0 {
			return nil, fmt.Errorf("%w: goredis: RunWait on a Cluster needs a first call with keys to find its master", driver.ErrInvalid)
		}
		return c.MasterForKey(ctx, calls[0].Keys[0])
	}
	return nil, fmt.Errorf("dlm: goredis: %T cannot send scripts and WAIT on one connection (use *redis.Client, a failover client or *redis.ClusterClient): %w", n.c, errors.ErrUnsupported)
}

// followTopology has a Cluster client reload its slot map, in the
// background, when a call failed in a way a failover explains: its master
// did not answer (a refused, reset or timed-out connection, or the call's
// deadline passed) or the Cluster replied CLUSTERDOWN, MOVED or READONLY.
// go-redis reloads by itself only every ClusterStateReloadInterval (60s by
// default) and on redirections, so after a failover it would send a
// script, which it never retries, to the dead master until then. Reloads
// are cheap: go-redis runs at most one at a time, 200ms apart.
func followTopology(cc *redis.ClusterClient, calls []driver.Call, err error) {
	if topologyError(err) || slices.ContainsFunc(calls, func(c driver.Call) bool { return topologyError(c.Err) }) {
		cc.ReloadState(context.Background())
	}
}

// topologyError reports whether err is one after which a Cluster's slot
// map may be stale (see followTopology).
func topologyError(err error) bool {
	var re redis.Error
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, driver.ErrInvalid), errors.Is(err, driver.ErrClosed):
		return false
	case errors.As(err, &re):
		msg := re.Error()
		return strings.HasPrefix(msg, "CLUSTERDOWN") || strings.HasPrefix(msg, "MOVED") || strings.HasPrefix(msg, "READONLY")
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}
