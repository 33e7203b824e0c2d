// Package errs keeps the module's one error style: a message begins with
// "dlm: " once, then where the error arose, then what happened, e.g.
// "dlm: strategy.NewSingle: invalid argument: WithTimeout: -1s is
// negative" or "dlm: rwlock: write: lock not acquired: ...". Sentinels
// and errors made where a failure arises begin with "dlm: " themselves;
// a caller that adds where it happened wraps the error with Within, which
// keeps errors.Is and errors.As working and the prefix single.
package errs

import "strings"

// Within returns err with where put after its "dlm: " prefix (added when
// err lacks one). It unwraps to err; Within of a nil error is nil.
func Within(where string, err error) error {
	if err == nil {
		return nil
	}
	return &within{where: where, err: err}
}

type within struct {
	where string
	err   error
}

func (w *within) Error() string {
	return "dlm: " + w.where + ": " + strings.TrimPrefix(w.err.Error(), "dlm: ")
}

func (w *within) Unwrap() error { return w.err }

// Cause returns err's message without its "dlm: " prefix, for a message
// that names it after its own prefix.
func Cause(err error) string { return strings.TrimPrefix(err.Error(), "dlm: ") }
