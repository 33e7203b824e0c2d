package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// A brokenStrategy wraps the single-instance strategy and breaks one rule.
type brokenStrategy struct {
	driver.Strategy
	breakage string

	mu      sync.Mutex
	holders map[string]string // key → token of the last successful Acquire
}

func (b *brokenStrategy) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	l, err := b.Strategy.Acquire(ctx, key, token, ttl)
	switch b.breakage {
	case "SharesLocks": // grants a held lock anyway
		if err != nil {
			return driver.Lease{Fence: 1, Until: time.Now().Add(ttl / 2)}, nil
		}
	case "LeaseFromReply": // counts the lease from the reply, not the request
		l.Until = time.Now().Add(ttl)
	case "ConstantFence":
		l.Fence = 1
	}
	if err == nil {
		b.mu.Lock()
		b.holders[key] = token
		b.mu.Unlock()
	}
	return l, err
}

func (b *brokenStrategy) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	if b.breakage == "HandsOffForAnyone" {
		b.mu.Lock()
		if h, ok := b.holders[key]; ok {
			from = h
		}
		b.mu.Unlock()
	}
	l, err := b.Strategy.(driver.Handoff).Handoff(ctx, key, from, to, ttl)
	if b.breakage == "ConstantFence" {
		l.Fence = 1
	}
	if err == nil {
		b.mu.Lock()
		b.holders[key] = to
		b.mu.Unlock()
	}
	return l, err
}

func (b *brokenStrategy) Release(ctx context.Context, key, token string) error {
	if b.breakage == "ReleasesForAnyone" {
		b.mu.Lock()
		if h, ok := b.holders[key]; ok {
			token = h
		}
		b.mu.Unlock()
	}
	return b.Strategy.Release(ctx, key, token)
}

func (b *brokenStrategy) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	if b.breakage == "NeverShortens" { // as PEXPIRE GT would: an Extend never shortens a lock's TTL
		ttl = max(ttl, 10*time.Second)
	}
	return b.Strategy.Extend(ctx, key, token, ttl)
}

func (b *brokenStrategy) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	if b.breakage == "ExtendsForAnyone" {
		locks = slices.Clone(locks)
		b.mu.Lock()
		for i, l := range locks {
			if h, ok := b.holders[l.Key]; ok {
				locks[i].Token = h
			}
		}
		b.mu.Unlock()
	}
	return b.Strategy.ExtendMany(ctx, locks, ttl)
}

func (b *brokenStrategy) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	switch b.breakage {
	case "NeverNotifies":
		notify = func() {}
	case "Unsupported":
		return nil, fmt.Errorf("broken: WatchRelease: %w", errors.ErrUnsupported)
	}
	return b.Strategy.WatchRelease(ctx, key, notify)
}

// TestBrokenStrategy runs RunStrategy over the broken strategy named by
// DLM_CONFORMANCE_BROKEN; TestBrokenStrategiesFail runs it in a subprocess.
func TestBrokenStrategy(t *testing.T) {
	breakage := os.Getenv(brokenEnv)
	if breakage == "" {
		t.Skip(brokenEnv + " is not set; TestBrokenStrategiesFail runs this test in a subprocess")
	}
	srv := redistest.Start(t)
	var node driver.Node
	if breakage == "FallbackWrongSource" { // a broken driver under a correct strategy
		node = newBrokenNode(t, srv.Addr, breakage)
	} else {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		node = goredis.New(c)
	}
	conformance.RunStrategy(t, conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: []string{srv.Addr}},
		func(nodes []driver.Node) (driver.Strategy, error) {
			s, err := strategy.NewSingle(nodes[0])
			return &brokenStrategy{Strategy: s, breakage: breakage, holders: map[string]string{}}, err
		})
}

// Each strategy broken on purpose makes RunStrategy fail, naming the rule.
func TestBrokenStrategiesFail(t *testing.T) {
	checkBroken(t, "TestBrokenStrategy", []breakage{
		{name: "None", passed: []string{"BatchExtend", "WatchRelease", "Handoff"}},
		{name: "Unsupported", skipped: []string{"WatchRelease"}},
		{name: "SharesLocks", rules: []string{"MutualExclusion", "OneWinner", "ReleaseOwnerOnly"}},
		{name: "LeaseFromReply", rules: []string{"Lease", "SlowLease"}},
		{name: "ConstantFence", rules: []string{"FencesIncrease", "Handoff"}},
		{name: "HandsOffForAnyone", rules: []string{"Handoff"}},
		{name: "ReleasesForAnyone", rules: []string{"ReleaseOwnerOnly"}},
		{name: "ExtendsForAnyone", rules: []string{"BatchExtend"}},
		{name: "NeverNotifies", rules: []string{"WatchRelease"}},
		{name: "NeverShortens", rules: []string{"UnlockAt"}},
		// The script caches are flushed before each rule, so the driver's
		// fallback runs (Release runs the acquire script).
		{name: "FallbackWrongSource", rules: []string{"MutualExclusion", "ReleaseOwnerOnly"}},
	})
}
