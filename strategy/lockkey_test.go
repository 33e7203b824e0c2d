package strategy

import (
	"testing"

	"github.com/dlmgo/dlm/nodekit"
)

// Lock keys: distinct keys never share one; a key's own hash tag decides its
// slot; a '}' does not cut the tag short; lock and counter share a slot.
func TestLockNames(t *testing.T) {
	keys := []string{"a", "{a}", "a}", "{a", "}a", "{}a", "x{a}y", "{a}{b}", "tenant7}1", "tenant7}2",
		"dlm:{a}", "t:{a}", "x:{61}", "61", "{", "}", "{}", "\x00{\xff}", "ключ{тег}"}
	seen := map[string]string{}
	for _, k := range keys {
		lock := lockName(k)
		if other, dup := seen[lock]; dup {
			t.Errorf("keys %q and %q share the lock key %q", k, other, lock)
		}
		seen[lock] = k
		keys := lockKeys(k)
		if len(keys) != 2 || keys[0] != lock || nodekit.Slot(lock) != nodekit.Slot(keys[1]) {
			t.Errorf("key %q: keys %q not in one slot", k, keys)
		}
	}
	for _, k := range []string{"{a}", "x{a}y", "{a}{b}", "{a}:profile"} {
		if nodekit.Slot(lockName(k)) != nodekit.Slot("a") {
			t.Errorf("key %q: its lock is not in the slot of its tag {a}", k)
		}
	}
	if nodekit.Slot(lockName("tenant7}1")) == nodekit.Slot(lockName("tenant7}2")) {
		t.Errorf("keys with a '}' share the slot of the text before it")
	}
}
