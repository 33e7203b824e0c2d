// Package token reads back the tokens of a dlm.Manager's locks, which the
// Manager makes (queues.newToken, queue.go): 20 random bytes,
// hex-encoded, then ".<unix milliseconds>.<TTL in milliseconds>.<owner>".
// Strategies treat tokens as opaque; package inspect reads who holds a
// lock from them.
package token

import (
	"strconv"
	"strings"
	"time"
)

// Parse reads back what the Manager put in token: the owner, when the acquisition
// began (to the millisecond) and the TTL. ok is false for a token the
// Manager did not make.
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
