// Package token makes the tokens of a dlm.Manager's locks and reads them
// back: 20 random bytes, hex-encoded, then
// ".<unix milliseconds>.<TTL in milliseconds>.<owner>". Strategies treat
// tokens as opaque; package inspect reads who holds a lock from them.
package token

import (
	crand "crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// New returns a new token for an acquisition by owner beginning now with
// lease ttl.
func New(owner string, ttl time.Duration) string {
	var b [20]byte
	_, _ = crand.Read(b[:]) // never fails; see crypto/rand.Read
	// Built on the stack when the owner fits (dlm.MaxOwnerLen does), so
	// that the string is the one allocation.
	var stack [40 + 3 + 2*20 + 128]byte
	hex.Encode(stack[:40], b[:])
	buf := stack[:40]
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, ttl.Milliseconds(), 10)
	buf = append(buf, '.')
	buf = append(buf, owner...)
	return string(buf)
}

// Parse reads back what New put in token: the owner, when the acquisition
// began (to the millisecond) and the TTL. ok is false for a token New did
// not make.
func Parse(token string) (owner string, since time.Time, ttl time.Duration, ok bool) {
	parts := strings.SplitN(token, ".", 4)
	if len(parts) != 4 || len(parts[0]) != 40 {
		return "", time.Time{}, 0, false
	}
	ms, err1 := strconv.ParseInt(parts[1], 10, 64)
	t, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || t < 0 || parts[3] == "" {
		return "", time.Time{}, 0, false
	}
	return parts[3], time.UnixMilli(ms), time.Duration(t) * time.Millisecond, true
}
