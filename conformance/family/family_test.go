package family_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance/family"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// brokenEnv makes TestFamily run over a strategy that grants held keys.
const brokenEnv = "DLM_FAMILY_BROKEN"

// sharing grants a key another token holds, as if it were free.
type sharing struct{ driver.Strategy }

func (s sharing) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.Strategy.Acquire(ctx, key, token, ttl)
	if err != nil {
		return driver.Lease{Fence: 1, Until: time.Now().Add(ttl / 2)}, nil
	}
	return l, nil
}

// TestFamily runs the rules over the single-instance strategy, or, with
// brokenEnv set (TestFamilyFailsSharedLocks), over sharing.
func TestFamily(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	node := goredis.New(c)
	family.Run(t, func(*testing.T) []driver.Node { return []driver.Node{node} }, func(nodes []driver.Node) (driver.Strategy, error) {
		s, err := strategy.NewSingle(nodes[0])
		if os.Getenv(brokenEnv) != "" {
			return sharing{s}, err
		}
		return s, err
	})
}

// A strategy that shares held keys fails every rule: each primitive then
// lets holders overlap, or a waiter in before a stopped holder's lease ended.
func TestFamilyFailsSharedLocks(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("in the subprocess")
	}
	redistest.Binary(t, "redis-server")
	cmd := exec.Command(os.Args[0], "-test.run=^TestFamily$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = redistest.SubprocessEnv(t, brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("family.Run passed a strategy that shares held keys:\n%s", out)
	}
	for _, rule := range []string{"SemaphorePermits", "SemaphoreLapsedPermit", "MultiKeyAllOrNone", "RWLock", "FamilyLapsedHolder"} {
		if !regexp.MustCompile(`--- FAIL: TestFamily/` + rule + ` `).Match(out) {
			t.Errorf("rule %s did not fail for a strategy that shares held keys\n%s", rule, out)
		}
	}
}
