package eval

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Slot agrees with the CRC16 check value and with a real Cluster's
// CLUSTER KEYSLOT, hash tags and odd keys included.
func TestSlot(t *testing.T) {
	t.Parallel() // owns its Cluster
	if got, want := Slot("123456789"), 0x31C3; got != want {
		t.Fatalf("Slot(123456789) = %#x, want %#x", got, want)
	}
	c := redistest.StartCluster(t, 1)[0].Client(t)
	keys := []string{"", "a", "dlm:{k}", "dlm:{}x", "{a}{b}", "x{a}y", "{", "}", "dlm:{tenant7}}:fence", "\x00\xff{\x80}", "ключ"}
	var every []byte // every byte value, so every entry of the table is used
	for b := range 256 {
		if b != '{' && b != '}' {
			every = append(every, byte(b))
		}
	}
	keys = append(keys, string(every))
	r := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		k := make([]byte, r.IntN(64))
		for i := range k {
			k[i] = byte(r.IntN(256))
		}
		keys = append(keys, string(k))
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// BenchmarkSlot is the slot of a lock key as the strategies name it.
func BenchmarkSlot(b *testing.B) {
	for b.Loop() {
		Slot("bench:c0:distinct:17")
	}
}
