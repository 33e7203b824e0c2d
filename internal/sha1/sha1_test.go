package sha1_test

import (
	stdsha1 "crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/dlmgo/dlm/internal/sha1"
)

// The vectors of FIPS 180-4's examples (and RFC 3174), and every length
// around the padding's block boundaries.
func TestSum(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
		{"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "84983e441c3bd26ebaae4aa1f95129e5e54670f1"},
		{strings.Repeat("a", 1000000), "34aa973cd4c4daa4f61eeb2bdbad27316534016f"},
	} {
		if got := sha1.Hex(tc.in); got != tc.want {
			t.Errorf("Hex(%.20q… %d bytes) = %s, want %s", tc.in, len(tc.in), got, tc.want)
		}
	}
	for n := range 300 {
		checkStd(t, []byte(strings.Repeat("x", n)))
	}
}

// FuzzSum compares Sum and Hex with crypto/sha1 (which the tests may use:
// they do not run with GODEBUG=fips140=only).
func FuzzSum(f *testing.F) {
	for _, s := range []string{"", "a", "return {1}", strings.Repeat("ab", 40)} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkStd)
}

func checkStd(t *testing.T, data []byte) {
	want := stdsha1.Sum(data)
	if got := sha1.Sum(data); got != want {
		t.Fatalf("Sum(%d bytes) = %x, want %x", len(data), got, want)
	}
	if got := sha1.Hex(string(data)); got != hex.EncodeToString(want[:]) {
		t.Fatalf("Hex(%d bytes) = %s, want %x", len(data), got, want)
	}
}

func BenchmarkHex(b *testing.B) {
	src := strings.Repeat("redis.call('SET', KEYS[1], ARGV[1])\n", 60) // a script's size
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		sha1.Hex(src)
	}
}
