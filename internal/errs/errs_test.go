package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestWithinKeepsOnePrefix(t *testing.T) {
	sentinel := errors.New("dlm: invalid argument")
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: WithTimeout: -1s is negative", sentinel), "dlm: strategy.NewSingle: invalid argument: WithTimeout: -1s is negative"},
		{errors.New("connection refused"), "dlm: strategy.NewSingle: connection refused"},
		{Within("inner", sentinel), "dlm: strategy.NewSingle: inner: invalid argument"},
	}
	for _, c := range cases {
		got := Within("strategy.NewSingle", c.err)
		if got.Error() != c.want {
			t.Errorf("Within(%q) = %q, want %q", c.err, got, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("Within(%q) does not match what it wraps", c.err)
		}
	}
	if Within("x", nil) != nil {
		t.Error("Within of nil is not nil")
	}
}
