package nodekit

import "strings"

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384. On a server that is not a
// Cluster it only groups keys.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[k]]
	}
	return int(crc) % 16384
}

// crcTable holds the CRC16 (XMODEM, polynomial 0x1021) of each byte: a
// key's CRC is then one lookup a byte, where the bit-by-bit loop took
// eight hard-to-predict branches (BenchmarkSlot, a 20-byte key: about
// 270ns, against 40ns by the table).
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()
