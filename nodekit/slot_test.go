package nodekit

import (
	"context"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Slot agrees with the CRC16 check value and with a real Cluster's
// CLUSTER KEYSLOT, hash tags and odd keys included.
func TestSlot(t *testing.T) {
	if got, want := Slot("123456789"), 0x31C3; got != want {
		t.Fatalf("Slot(123456789) = %#x, want %#x", got, want)
	}
	c := redistest.StartCluster(t, 1)[0].Client(t)
	for _, k := range []string{"", "a", "dlm:{k}", "dlm:{}x", "{a}{b}", "x{a}y", "{", "}", "dlm:{tenant7}}:fence", "\x00\xff{\x80}", "ключ"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}
