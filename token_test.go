package dlm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/token"
)

// A token is one allocation, its string, whatever the owner's length up to
// MaxOwnerLen; internal/token.Parse reads back what the Manager put in; and
// no two tokens share their random part.
func TestNewTokenAllocatesOnce(t *testing.T) {
	for _, owner := range []string{"a", "prog@host:1234", strings.Repeat("o", dlm.MaxOwnerLen)} {
		if n := testing.AllocsPerRun(100, func() { _ = dlm.NewTokenForTest(owner, 1500*time.Millisecond) }); n != 1 && !raceOn {
			t.Errorf("owner of %d bytes: %v allocations per token, want 1", len(owner), n)
		}
		before := time.Now().Truncate(time.Millisecond)
		tok := dlm.NewTokenForTest(owner, 1500*time.Millisecond)
		got, since, ttl, ok := token.Parse(tok)
		if !ok || got != owner || ttl != 1500*time.Millisecond || since.Before(before) || since.After(time.Now()) {
			t.Errorf("Parse(%q) = %q, %v, %v, %v", tok, got, since, ttl, ok)
		}
		if a, b := dlm.NewTokenForTest(owner, time.Second), dlm.NewTokenForTest(owner, time.Second); a[:40] == b[:40] {
			t.Error("two tokens share their random part")
		}
	}
}
