package strategy

import (
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/nodekit"
)

// DriftMarginForTest is the default drift margin of a lease of ttl.
func DriftMarginForTest(ttl time.Duration) time.Duration {
	c := defaultConfig()
	return c.driftMargin(ttl)
}

// Before70ForTest makes acquisitions, until t ends, take the acquire
// script's path for a server before Redis 7.0 (which has no
// redis.REDIS_VERSION_NUM).
func Before70ForTest(t testing.TB) {
	const test = "and redis.REDIS_VERSION_NUM then"
	old := acquireScript
	src := old.Source()
	if strings.Count(src, test) != 1 {
		t.Fatalf("the acquire script does not test the version as %q", test)
	}
	acquireScript = nodekit.NewScript(strings.Replace(src, test, "and nil then", 1))
	t.Cleanup(func() { acquireScript = old })
}
