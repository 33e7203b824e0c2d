package strategy

import (
	"strings"
	"sync"

	"github.com/dlmgo/dlm/nodekit"
)

const slots = 16384 // Redis Cluster hash slots

// fenceName returns the Redis key of the fencing counter of hash slot
// slot: "dlm:fence:{T}", T the first three-character string over [0-9a-zA-Z]
// (in that order) whose slot it is. The names are part of the storage
// format: every version must choose the same ones.
func fenceName(slot int) string {
	const n = len(fencePrefix) + 3 + 1
	names := fenceNames()
	return names[slot*n : (slot+1)*n]
}

// quarantineName returns the Redis key of the amnesia guard's quarantine
// marker of hash slot slot: "dlm:quarantine:{T}", T as in fenceName.
func quarantineName(slot int) string {
	return quarantinePrefix + fenceName(slot)[len(fencePrefix):]
}

const (
	fencePrefix      = "dlm:fence:{"
	quarantinePrefix = "dlm:quarantine:{"
)

// fenceNames returns every slot's counter name, in slot order, in one
// string (240 KiB), built at first use.
var fenceNames = sync.OnceValue(func() string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var tags [slots][3]byte
	found := 0
	for _, a := range []byte(alphabet) {
		for _, b := range []byte(alphabet) {
			for _, c := range []byte(alphabet) {
				tag := [3]byte{a, b, c}
				if s := nodekit.Slot(string(tag[:])); tags[s][0] == 0 {
					tags[s] = tag
					found++
				}
			}
		}
	}
	if found != slots {
		panic("strategy: fence tags do not cover every slot") // checked by TestFenceNames
	}
	var b strings.Builder
	b.Grow(slots * (len(fencePrefix) + 4))
	for _, t := range tags {
		b.WriteString(fencePrefix)
		b.Write(t[:])
		b.WriteByte('}')
	}
	return b.String()
})
