package strategy

import (
	"strings"
	"sync"
)

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// keySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384. On a server that is not a
// Cluster it only groups keys.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slots
}

// fenceName returns the Redis key of the fencing counter of hash slot
// slot: "dlm:fence:{T}", T the first three-character string over [0-9a-zA-Z]
// (in that order) whose slot it is. The names are part of the storage
// format: every version must choose the same ones.
func fenceName(slot int) string {
	const n = len(fencePrefix) + 3 + 1
	names := fenceNames()
	return names[slot*n : (slot+1)*n]
}

const fencePrefix = "dlm:fence:{"

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
				if s := keySlot(string(tag[:])); tags[s][0] == 0 {
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
