package box

import (
	"fmt"
	"testing"
)

// TestString: a boxed string is a string to a type switch, an assertion,
// equality and fmt, and costs no allocation.
func TestString(t *testing.T) {
	s := []string{"lock", "", "a longer value with spaces"}
	for i := range s {
		v := String(&s[i])
		got, ok := v.(string)
		if !ok || got != s[i] || v != any(s[i]) || fmt.Sprint(v) != s[i] {
			t.Errorf("String(%q) = %#v", s[i], v)
		}
		switch x := v.(type) {
		case string:
			if x != s[i] {
				t.Errorf("type switch: %q, want %q", x, s[i])
			}
		default:
			t.Errorf("type switch: %T, want string", v)
		}
	}
	var sink any
	if n := testing.AllocsPerRun(100, func() { sink = String(&s[2]) }); n != 0 {
		t.Errorf("String allocates %v times", n)
	}
	_ = sink
}
