package dlm

import (
	"errors"
	"strings"
)

// Permanent reports whether err says that trying again cannot succeed, so
// that Lock returns it at once instead of waiting:
//
//   - an error matching ErrInvalid or ErrClosed;
//   - a Redis error reply that refuses the request itself: WRONGTYPE (the
//     lock's key holds a value of another type), NOAUTH, WRONGPASS and
//     NOPERM (authentication and ACLs), DENIED (protected mode), "ERR AUTH"
//     and "ERR invalid password" (a password the server does not expect),
//     and "ERR unknown command" (an endpoint without scripting, such as a
//     Sentinel's port);
//   - an error in err's tree with a method Permanent() bool that reports
//     true; the outermost such method decides (a Redlock quorum error says
//     whether too many nodes failed permanently for a quorum ever to form).
//
// Everything else is transient and Lock keeps waiting: a refused or reset
// connection, a timeout, and the replies LOADING, TRYAGAIN, MOVED, ASK,
// CLUSTERDOWN, READONLY, BUSY, MASTERDOWN, MISCONF and OOM, which the
// deployment can cure by itself or an operator can cure while Lock waits.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	var p interface{ Permanent() bool }
	if errors.As(err, &p) {
		return p.Permanent()
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) {
		return true
	}
	return anyLeaf(err, func(e error) bool { return permanentReply(e.Error()) })
}

// permanentReplies are the prefixes of error replies that Permanent
// classifies as permanent.
var permanentReplies = []string{
	"WRONGTYPE", "NOAUTH", "WRONGPASS", "NOPERM", "DENIED",
	"ERR AUTH", "ERR invalid password", "ERR unknown command",
}

// permanentReply reports whether a Redis error reply (its text, code
// first) is one that Permanent classifies as permanent.
func permanentReply(reply string) bool {
	for _, p := range permanentReplies {
		if strings.HasPrefix(reply, p) {
			return true
		}
	}
	return false
}

// anyLeaf reports whether f holds for an error in err's tree that wraps no
// other.
func anyLeaf(err error, f func(error) bool) bool {
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return anyLeaf(inner, f)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil && anyLeaf(e, f) {
				return true
			}
		}
		return false
	}
	return f(err)
}
