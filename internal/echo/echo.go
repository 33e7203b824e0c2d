// Package echo bounds what an error message quotes of a user's input, so
// that a mistaken 100 KB argument or URL parameter does not come back whole
// on standard error.
package echo

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Max is how many bytes of a user's input Quote keeps.
const Max = 64

// Quote returns s Go-quoted (strconv.Quote) when it is at most Max bytes,
// else its first Max bytes, cut at a character's start, quoted and followed
// by "…(N bytes)".
func Quote(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	cut := Max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("…(%d bytes)", len(s))
}

// Bare returns s as it is when it is at most Max bytes of printable text,
// else Quote(s): for messages that name a short value without quotes.
func Bare(s string) string {
	if len(s) <= Max && strconv.CanBackquote(s) {
		return s
	}
	return Quote(s)
}
