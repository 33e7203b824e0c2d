package dlm

import (
	"errors"
	"strings"
)

// A ReplyError is an error reply of a Redis server or Sentinel, in one form
// whatever its client's wording: every driver returns the server's error
// replies as a *ReplyError that wraps its client's own error (so errors.As
// with the client's type still works). Permanent, and everything else in
// dlm, classifies replies by Code and Message, never by a client's text.
// A reply with Code "NOSCRIPT" matches ErrNoScript.
type ReplyError struct {
	// Code is the reply's first word: "ERR", "WRONGTYPE", "NOAUTH", ...
	Code string
	// Message is the rest of the reply.
	Message string
	// Err is the client's error for the reply.
	Err error
}

func (e *ReplyError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + " " + e.Message
}

func (e *ReplyError) Unwrap() error { return e.Err }

// Is makes a NOSCRIPT reply match ErrNoScript.
func (e *ReplyError) Is(target error) bool { return target == ErrNoScript && e.Code == "NOSCRIPT" }

// Permanent reports whether err says that trying again cannot succeed, so
// that Lock returns it at once instead of waiting:
//
//   - an error matching ErrInvalid, ErrClosed or ErrUnknownMaster;
//   - a *ReplyError in err's tree that refuses the request itself: the
//     codes WRONGTYPE (the lock's key holds a value of another type),
//     NOAUTH, WRONGPASS and NOPERM (authentication and ACLs) and DENIED
//     (protected mode), and code ERR with a message that begins "unknown
//     command" (an endpoint without scripting, such as a Sentinel's port),
//     "AUTH" or "invalid password" (a password the server does not
//     expect) or "No such master" (a Sentinel's unknown master name);
//   - an error in err's tree with a method Permanent() bool that reports
//     true; the outermost such method decides (a Redlock quorum error says
//     whether too many nodes failed permanently for a quorum ever to form).
//
// Everything else is transient and Lock keeps waiting: a refused or reset
// connection, a timeout, and the replies LOADING, TRYAGAIN, MOVED, ASK,
// CLUSTERDOWN, READONLY, BUSY, MASTERDOWN, MISCONF and OOM, which the
// deployment can cure by itself or an operator can cure while Lock waits.
// An error reply that is not a *ReplyError (a driver that does not map its
// client's replies) is transient: conformance.RunNode checks that drivers
// map them.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	var p interface{ Permanent() bool }
	if errors.As(err, &p) {
		return p.Permanent()
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) || errors.Is(err, ErrUnknownMaster) {
		return true
	}
	return anyReply(err, permanentReply)
}

// permanentReply reports whether r is a reply that Permanent classifies as
// permanent.
func permanentReply(r *ReplyError) bool {
	switch r.Code {
	case "WRONGTYPE", "NOAUTH", "WRONGPASS", "NOPERM", "DENIED":
		return true
	case "ERR":
		for _, p := range []string{"unknown command", "AUTH", "invalid password", "No such master"} {
			if strings.HasPrefix(r.Message, p) {
				return true
			}
		}
	}
	return false
}

// anyReply reports whether f holds for a *ReplyError in err's tree.
func anyReply(err error, f func(*ReplyError) bool) bool {
	if r, ok := err.(*ReplyError); ok && f(r) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return anyReply(inner, f)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil && anyReply(e, f) {
				return true
			}
		}
	}
	return false
}
