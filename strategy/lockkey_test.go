package strategy

import (
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/internal/eval"
)

// Lock keys: distinct keys never share one; a key's own hash tag decides its
// slot; a '}' does not cut the tag short; lock and counter share a slot.
func TestLockNames(t *testing.T) {
	keys := []string{"a", "{a}", "a}", "{a", "}a", "{}a", "x{a}y", "{a}{b}", "tenant7}1", "tenant7}2",
		"dlm:{a}", "t:{a}", "x:{61}", "61", "{", "}", "{}", "\x00{\xff}", "ключ{тег}"}
	for k, want := range map[string]string{"a": "dlm:{a}", "{a}": "dlm:t:{a}", "a}": "dlm:x:{617d}"} {
		if got := lockName(k); got != want {
			t.Errorf("lockName(%q) = %q, want %q", k, got, want)
		}
	}
	seen := map[string]string{}
	for _, k := range keys {
		lock := lockName(k)
		if other, dup := seen[lock]; dup {
			t.Errorf("keys %q and %q share the lock key %q", k, other, lock)
		}
		seen[lock] = k
		keys := lockKeys(k)
		if len(keys) != 2 || keys[0] != lock || eval.Slot(lock) != eval.Slot(keys[1]) {
			t.Errorf("key %q: keys %q not in one slot", k, keys)
		}
	}
	for _, k := range []string{"{a}", "x{a}y", "{a}{b}", "{a}:profile"} {
		if eval.Slot(lockName(k)) != eval.Slot("a") {
			t.Errorf("key %q: its lock is not in the slot of its tag {a}", k)
		}
	}
	if eval.Slot(lockName("tenant7}1")) == eval.Slot(lockName("tenant7}2")) {
		t.Errorf("keys with a '}' share the slot of the text before it")
	}
}

// lockCall's keys[0] is lockName(key), and a call makes two allocations:
// its keys and arguments, and the lock key's text.
func TestLockCallName(t *testing.T) {
	long := strings.Repeat("k", 100)
	for _, k := range []string{"a", "{a}", "a}", "{a", "}a", "{}a", "x{a}y", "tenant7}1", "\x00{\xff}", "ключ{тег}",
		strings.Repeat("k", 74), strings.Repeat("k", 75), strings.Repeat("}", 36), strings.Repeat("}", 37), long, long + "}", "{" + long + "}"} {
		keys, args := lockCall(k, "tok", time.Second, 1)
		if len(keys) != 1 || keys[0] != lockName(k) || lockNameLen(k) != len(lockName(k)) || len(args) != 2 || args[0] != "tok" || args[1] != "1000" {
			t.Errorf("lockCall(%q) = %q, %q; want [%q], [tok 1000]", k, keys, args, lockName(k))
		}
	}
	if raceOn {
		return // the race detector allocates
	}
	if n := testing.AllocsPerRun(100, func() { heldCall("orders:invoice:123456789", "tok", time.Second) }); n != 2 {
		t.Errorf("heldCall makes %v allocations, want 2", n)
	}
}
