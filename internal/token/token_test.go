package token

import (
	"strings"
	"testing"
	"time"
)

// A token is one allocation: its string, whatever the owner's length up to
// dlm.MaxOwnerLen; and Parse reads back what New put in.
func TestNewAllocatesOnce(t *testing.T) {
	for _, owner := range []string{"a", "prog@host:1234", strings.Repeat("o", 128)} {
		if n := testing.AllocsPerRun(100, func() { _ = New(owner, 1500*time.Millisecond) }); n != 1 && !raceOn {
			t.Errorf("owner of %d bytes: %v allocations per token, want 1", len(owner), n)
		}
		before := time.Now().Truncate(time.Millisecond)
		tok := New(owner, 1500*time.Millisecond)
		got, since, ttl, ok := Parse(tok)
		if !ok || got != owner || ttl != 1500*time.Millisecond || since.Before(before) || since.After(time.Now()) {
			t.Errorf("Parse(%q) = %q, %v, %v, %v", tok, got, since, ttl, ok)
		}
		if a, b := New(owner, time.Second), New(owner, time.Second); a[:40] == b[:40] {
			t.Error("two tokens share their random part")
		}
	}
}
