package strategy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Every slot has its own fencing counter, in that slot (as a real Cluster
// reads it), and the names never change: they are part of the storage
// format, and two versions choosing differently would hand out fences from
// two counters.
func TestFenceNames(t *testing.T) {
	const want = "bd5793c0b34c62ada657f81d3d13381112ba2921312c8f7caecd3b2e69cd456e"
	if got := fmt.Sprintf("%x", sha256.Sum256([]byte(fenceNames()))); got != want {
		t.Errorf("fence counter names changed: sha256 %s, was %s", got, want)
	}
	c := redistest.StartCluster(t, 1)[0].Client(t)
	pipe := c.Pipeline()
	cmds := make([]interface{ Val() int64 }, slots)
	for s := range slots {
		cmds[s] = pipe.ClusterKeySlot(context.Background(), fenceName(s))
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for s := range slots {
		name := fenceName(s)
		if seen[name] || len(name) != len("dlm:fence:{abc}") {
			t.Errorf("slot %d: counter %q repeats or has another form", s, name)
		}
		seen[name] = true
		if got := cmds[s].Val(); got != int64(s) {
			t.Errorf("counter %q of slot %d is in slot %d", name, s, got)
		}
	}
}
