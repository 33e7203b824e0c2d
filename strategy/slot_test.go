package strategy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// keySlot agrees with the CRC16 check value and with a real Cluster's
// CLUSTER KEYSLOT, hash tags and odd keys included.
func TestKeySlot(t *testing.T) {
	if got, want := keySlot("123456789"), 0x31C3; got != want {
		t.Fatalf("keySlot(123456789) = %#x, want %#x", got, want)
	}
	c := redistest.StartCluster(t, 1)[0].Client(t)
	for _, k := range []string{"", "a", "dlm:{k}", "dlm:{}x", "{a}{b}", "x{a}y", "{", "}", "dlm:{tenant7}}:fence", "\x00\xff{\x80}", "ключ"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(k); int64(got) != want {
			t.Errorf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

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
