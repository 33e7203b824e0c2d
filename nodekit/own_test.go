package nodekit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A context's error that a client gives a call whose own context has not
// ended is another call's (rueidis closing a connection at one call's
// deadline): own says so and hides it from errors.Is; a call's own
// deadline, ended context or other error is left as it is. Over the real
// clients the conformance rule OwnContext checks the same
// (TestConformance of driver/rueidis and driver/valkeygo,
// TestPipeNodeConformance*).
func TestOwnContextError(t *testing.T) {
	live, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, theirs := range []error{context.DeadlineExceeded, context.Canceled} {
		err := own(live, theirs)
		if errors.Is(err, theirs) || !strings.Contains(err.Error(), "another call") {
			t.Errorf("own(live context, %v) = %v, want an error naming another call, not matching it", theirs, err)
		}
	}
	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	passed, cancelPassed := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPassed()
	other := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"nil", live, nil},
		{"another error", live, other},
		{"its own cancellation", ended, context.Canceled},
		{"its own deadline", passed, context.DeadlineExceeded},
	} {
		if got := own(tc.ctx, tc.err); got != tc.err { //nolint:errorlint // the same value, unchanged
			t.Errorf("%s: own returned %v, want %v unchanged", tc.name, got, tc.err)
		}
	}
}
