package dlm

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxOwnerLen bounds the owner string of WithOwner, in bytes.
const MaxOwnerLen = 128

// WithOwner names who takes the Manager's locks, so that an operator who
// finds a lock held (Manager.Inspect, `dlm inspect`) can tell which program
// holds it. The default is "PROGRAM@HOST:PID". The owner must be 1 to
// MaxOwnerLen bytes of UTF-8 text without control characters.
//
// The owner travels inside the lock's token, with the time the acquisition
// began and the lease's TTL: it is stored with the lock at no extra round
// trip, and goes when the lock is released or expires.
func WithOwner(owner string) Option {
	return Option{func(o *options) error {
		if err := checkOwner(owner); err != nil {
			return err
		}
		o.owner = owner
		return nil
	}}
}

func checkOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("WithOwner: empty owner")
	case len(owner) > MaxOwnerLen:
		return invalidf("WithOwner: owner of %d bytes is longer than MaxOwnerLen (%d)", len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return invalidf("WithOwner: owner %q is not UTF-8", owner)
	case strings.IndexFunc(owner, unicode.IsControl) >= 0:
		return invalidf("WithOwner: owner %q has a control character", owner)
	}
	return nil
}

// processOwner is the default owner: "PROGRAM@HOST:PID".
var processOwner = sync.OnceValue(func() string {
	prog := "go"
	if exe, err := os.Executable(); err == nil {
		prog = filepath.Base(exe)
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return FitOwner(fmt.Sprintf("%s@%s:%d", prog, host, os.Getpid()))
})

// FitOwner returns s made fit for WithOwner: invalid UTF-8 and control
// characters replaced by '?', cut to MaxOwnerLen bytes, "unknown" if empty.
func FitOwner(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	for len(s) > MaxOwnerLen || !utf8.ValidString(s) {
		s = s[:min(len(s), MaxOwnerLen)-1]
	}
	if s == "" {
		s = "unknown"
	}
	return s
}

// A Holder says who took a lock, as its token carries it (HolderOf).
type Holder struct {
	// Owner is the holder's WithOwner string.
	Owner string
	// Since is when the acquisition that took the lock began, read from
	// the holder's wall clock (to the millisecond).
	Since time.Time
	// TTL is the lease TTL the lock was taken with; renewals reset the
	// servers' TTL to it (Lock.Extend may choose another).
	TTL time.Duration
}

// newToken returns a new token for an acquisition by owner beginning now
// with lease ttl: 20 random bytes, hex-encoded, then
// ".<unix milliseconds>.<TTL in milliseconds>.<owner>". Strategies treat
// tokens as opaque; HolderOf reads them back.
func newToken(owner string, ttl time.Duration) string {
	var b [20]byte
	_, _ = crand.Read(b[:]) // never fails; see crypto/rand.Read
	buf := make([]byte, 0, 40+2*14+len(owner))
	buf = hex.AppendEncode(buf, b[:])
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, ttl.Milliseconds(), 10)
	buf = append(buf, '.')
	buf = append(buf, owner...)
	return string(buf)
}

// HolderOf reads who took a lock from its token (Lock.Token, or what
// Manager.Inspect found on the servers). ok is false for a token that a
// Manager of this version did not make, such as one of an earlier version.
func HolderOf(token string) (h Holder, ok bool) {
	parts := strings.SplitN(token, ".", 4)
	if len(parts) != 4 || len(parts[0]) != 40 {
		return Holder{}, false
	}
	ms, err1 := strconv.ParseInt(parts[1], 10, 64)
	ttl, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || ttl < 0 || parts[3] == "" {
		return Holder{}, false
	}
	return Holder{Owner: parts[3], Since: time.UnixMilli(ms), TTL: time.Duration(ttl) * time.Millisecond}, true
}

// NewToken returns a token for an acquisition by this Manager beginning
// now, carrying its owner as the Manager's locks do, for primitives that
// keep tokens of their own beside a lock (package fairlock's queue).
func (m *Manager) NewToken() string { return newToken(m.o.owner, m.o.ttl) }
