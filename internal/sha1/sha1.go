// Package sha1 computes SHA-1 digests (FIPS 180-4, section 6.1) without
// crypto/sha1, which panics when the program runs with
// GODEBUG=fips140=only. dlm uses SHA-1 only for what Redis names a cached
// script by (EVALSHA): a cache key, not a security function.
package sha1

import "encoding/binary"

// Size is the size of a digest in bytes.
const Size = 20

// Sum returns the SHA-1 digest of data.
func Sum(data []byte) [Size]byte {
	return sum(data)
}

// Hex returns the SHA-1 digest of s in lower-case hexadecimal, as Redis
// writes a script's (SCRIPT LOAD, EVALSHA).
func Hex(s string) string {
	d := sum(s)
	const digits = "0123456789abcdef"
	var out [2 * Size]byte
	for i, b := range d {
		out[2*i], out[2*i+1] = digits[b>>4], digits[b&0xf]
	}
	return string(out[:])
}

func sum[T string | []byte](data T) [Size]byte {
	h := [5]uint32{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0}
	n := len(data)
	// Whole blocks of the message, then the last one or two with the
	// padding: a 1 bit, zeros, and the message's length in bits.
	for len(data) >= 64 {
		var b [64]byte
		copy(b[:], data[:64])
		block(&h, &b)
		data = data[64:]
	}
	var tail [128]byte
	k := copy(tail[:], data)
	tail[k] = 0x80
	end := 64
	if k >= 56 {
		end = 128
	}
	binary.BigEndian.PutUint64(tail[end-8:end], uint64(n)<<3)
	for i := 0; i < end; i += 64 {
		block(&h, (*[64]byte)(tail[i:i+64]))
	}
	var d [Size]byte
	for i, v := range h {
		binary.BigEndian.PutUint32(d[4*i:], v)
	}
	return d
}

// block processes one 512-bit block (FIPS 180-4, 6.1.2).
func block(h *[5]uint32, p *[64]byte) {
	var w [80]uint32
	for t := range 16 {
		w[t] = binary.BigEndian.Uint32(p[4*t:])
	}
	for t := 16; t < 80; t++ {
		x := w[t-3] ^ w[t-8] ^ w[t-14] ^ w[t-16]
		w[t] = x<<1 | x>>31
	}
	a, b, c, d, e := h[0], h[1], h[2], h[3], h[4]
	for t := range 80 {
		var f, k uint32
		switch {
		case t < 20:
			f, k = b&c|^b&d, 0x5a827999 // Ch
		case t < 40:
			f, k = b^c^d, 0x6ed9eba1 // Parity
		case t < 60:
			f, k = b&c|b&d|c&d, 0x8f1bbcdc // Maj
		default:
			f, k = b^c^d, 0xca62c1d6 // Parity
		}
		tmp := (a<<5 | a>>27) + f + e + k + w[t]
		e, d, c, b, a = d, c, b<<30|b>>2, a, tmp
	}
	h[0] += a
	h[1] += b
	h[2] += c
	h[3] += d
	h[4] += e
}
