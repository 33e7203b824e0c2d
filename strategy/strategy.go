// Package strategy provides the locking algorithms of dlm: a single
// instance, Redlock over independent masters, and a primary with replicas
// behind Sentinel.
//
// Every strategy stores a lock for key K in one Redis key, whose value is
// the lock's fence and the holder's token ("<fence>:<token>", with a 0
// before the fence once an acquisition was refused on it: its release then
// publishes to the waiters):
//
//   - K has a hash tag of its own (a non-empty "{tag}", as Redis Cluster
//     reads it): "dlm:t:K", in the slot of the tag, so a lock can live
//     beside the data it guards;
//   - else K contains a '}': "dlm:x:{hex(K)}" (a '}' would end the tag);
//   - else "dlm:{K}".
//
// Fences come from one counter per Redis Cluster hash slot, "dlm:fence:{T}"
// with T a three-character tag of that slot, shared by every lock key of
// the slot: a server holds at most 16384 counters however many keys were
// ever locked. A fence is larger than every fence issued on its slot before
// it, and the fences of a slot are consecutive.
//
// What the server runs for each operation, and how each script is
// assembled from the files of scripts/, is in scripts/README.md.
package strategy

import (
	"context"
	"embed"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/nodekit"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// mustScript returns the embedded script file name with the files of
// prelude (helper functions: a script reading a lock's value uses
// "held.lua"), and the line eval.BodyMark unless the file has one of
// its own. The prelude goes at the file's line preludeMark when it has one
// (so that its functions are made only on the runs that reach it), else
// before the file.
func mustScript(name string, prelude ...string) *eval.Script {
	return eval.NewScript(scriptSource("", name, prelude...))
}

// preludeMark is the line of a script file where mustScript puts its
// prelude.
const preludeMark = "-- prelude\n"

// scriptSource is mustScript's source, with head put at the start of the
// body.
func scriptSource(head, name string, prelude ...string) string {
	read := func(n string) string {
		b, err := scriptFS.ReadFile("scripts/" + n)
		if err != nil {
			panic(err) // the file is embedded at build time
		}
		return string(b)
	}
	var pre strings.Builder
	for _, n := range prelude {
		pre.WriteString(read(n))
	}
	body := read(name)
	if strings.Contains(body, preludeMark) {
		body = strings.Replace(body, preludeMark, pre.String(), 1)
		pre.Reset()
	}
	if !strings.Contains(body, eval.BodyMark) {
		body = eval.BodyMark + head + body
	} else if head != "" {
		panic("strategy: a head for " + name + ", which has a body mark")
	}
	return pre.String() + body
}

var (
	acquireScript = mustScript("acquire.lua", "held.lua", "amnesia.lua")
	extendScript  = mustScript("extend.lua")
	fenceScript   = mustScript("redlock_fence.lua", "held.lua") // Redlock's write-back
)

// releaseScripts are release.lua for each announce mode (announce.lua):
// asking the server, 'p' and 's'. The mode is in the script rather than an
// argument, which the server would turn into a Lua string on every run.
var releaseScripts = [...]*eval.Script{
	eval.NewScript(scriptSource("local mode = nil\n", "release.lua", "announce.lua")),
	eval.NewScript(scriptSource("local mode = 'p'\n", "release.lua", "announce.lua")),
	eval.NewScript(scriptSource("local mode = 's'\n", "release.lua", "announce.lua")),
}

// releaseScript returns the release script for the announce mode given
// (publishArg's).
func releaseScript(mode string) *eval.Script {
	switch mode {
	case "p":
		return releaseScripts[1]
	case "s":
		return releaseScripts[2]
	}
	return releaseScripts[0]
}

// The failover strategy's scripts are the single-instance scripts, wrapped
// so that they also report how many replicas the primary has connected.
var (
	failoverAcquireScript = wrapReplicas(acquireScript)
	failoverExtendScript  = wrapReplicas(extendScript)
	probeScript           = mustScript("failover_probe.lua")
)

func wrapReplicas(s *eval.Script) *eval.Script {
	tail := mustScript("failover_replicas.lua").Source()
	return eval.NewScript("local function dlm_script()\n" + s.Source() + "\nend\nlocal r = dlm_script()\n" + tail)
}

// coalesced returns node with its calls coalesced, unless
// WithCoalescing(false) was given.
func (c *config) coalesced(node driver.Node) driver.Node {
	if q := c.coalescing(node); q != nil {
		return q
	}
	return node
}

// coalescing returns the coalescing layer over node, or nil when
// WithCoalescing(false) was given.
func (c *config) coalescing(node driver.Node) *eval.Node {
	if c.alone {
		return nil
	}
	return eval.Coalesce(node, 0, acquireScript, extendScript, releaseScripts[0], releaseScripts[1], releaseScripts[2])
}

// isNil reports whether n is nil or a nil pointer in an interface.
func isNil(n driver.Node) bool {
	if n == nil {
		return true
	}
	v := reflect.ValueOf(n)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// The codes of the replies of acquire.lua and extend.lua (acquireScript,
// extendScript), as verdict reads them; each comes with a value.
//
//   - replyRefused: an acquisition found the lock held by another token
//     (value: its pttl, -1 when it has no TTL, -2 for a hand-off whose token
//     does not hold it); an extension found the token not holding it
//     (value 0).
//   - replyGranted: the token holds the lock now (value: its fence). The
//     scripts reply the fence alone, an integer; failover_replicas.lua
//     turns it into {replyGranted, fence}.
//   - replyQuarantined: the amnesia guard refused an acquisition (value:
//     the ms the slot stays quarantined; see WithMaxTTL).
//   - replyRevoked: an operator revoked the token's lock (revoke.lua), so
//     an extension refused it (value 0).
const (
	replyRefused     int64 = 0
	replyGranted     int64 = 1
	replyQuarantined int64 = 2
	replyRevoked     int64 = 3
)

// releaseDeleted is release.lua's reply when it deleted the token's lock;
// it replies 0 when the token did not hold it.
const releaseDeleted int64 = 1

// verdict reads a reply r of acquire.lua or extend.lua: a grant is the
// fence alone (the script replies an integer, which a Node gives as
// []int64{fence}), anything else {code, value}, followed on a Failover by
// the replicas connected. It returns replyGranted and the fence for a
// grant, and ok false when r has neither shape.
func verdict(r []int64) (code, v int64, ok bool) {
	switch {
	case len(r) == 1 && r[0] >= 1:
		return replyGranted, r[0], true
	case len(r) >= 2:
		return r[0], r[1], true
	}
	return 0, 0, false
}

// driftMargin is the validity taken off a lease of the given TTL.
func (c *config) driftMargin(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + minDrift
}

// checkKey returns an error matching dlm.ErrInvalid when key cannot name a
// lock: empty, or longer than dlm.MaxKeyLen.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", dlm.ErrInvalid)
	case len(key) > dlm.MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes is longer than MaxKeyLen (%d)", dlm.ErrInvalid, len(key), dlm.MaxKeyLen)
	}
	return nil
}

// checkCall validates the arguments every strategy method shares.
func (c *config) checkCall(key, token string, ttl time.Duration, needTTL bool) error {
	switch {
	case checkKey(key) != nil:
		return checkKey(key)
	case token == "":
		return fmt.Errorf("%w: empty token", dlm.ErrInvalid)
	case !needTTL:
		return nil
	case ttl < time.Millisecond:
		return fmt.Errorf("%w: TTL %v is below Redis' 1ms resolution", dlm.ErrInvalid, ttl)
	case ttl > dlm.MaxTTL:
		return fmt.Errorf("%w: TTL %v is above dlm.MaxTTL (%v)", dlm.ErrInvalid, ttl, dlm.MaxTTL)
	case c.maxTTL > 0 && ttl > c.maxTTL:
		return fmt.Errorf("%w: TTL %v is above the strategy's WithMaxTTL (%v)", dlm.ErrInvalid, ttl, c.maxTTL)
	case ttl <= c.driftMargin(ttl):
		return fmt.Errorf("%w: TTL %v is not above its clock-drift margin %v", dlm.ErrInvalid, ttl, c.driftMargin(ttl))
	}
	return nil
}

// checkHandoff validates the tokens of a hand-off.
func checkHandoff(from, to string) error {
	switch {
	case from == "":
		return fmt.Errorf("%w: Handoff: empty token to hand off from", dlm.ErrInvalid)
	case from == to:
		return fmt.Errorf("%w: Handoff: from and to are the same token", dlm.ErrInvalid)
	}
	return nil
}

// withTimeout applies the per-node timeout, if any, to ctx. A ctx whose
// own deadline comes first is bound enough: it is returned as it is, since
// a derived context would end exactly when ctx does, and costs a timer,
// its Done channel and a place among ctx's children (10 allocations and
// 770 bytes per lock and unlock pair, BenchmarkLockUnlockDeadline).
func (c *config) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout <= 0 {
		return ctx, noCancel
	}
	if dl, ok := ctx.Deadline(); ok && !dl.After(time.Now().Add(c.timeout)) {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, c.timeout)
}

// noCancel is withTimeout's CancelFunc for a context it did not derive.
func noCancel() {}

// cleanupContext returns a context for undoing partial work after ctx ended.
func (c *config) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := c.timeout
	if d == 0 {
		d = time.Second
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// Keys returns the Redis keys that hold key's lock and its fencing counter
// (shared with the other lock keys of its hash slot), as the package
// documentation says: for inspecting a server, not for writing to it.
func Keys(key string) (lock, fence string) {
	keys := lockKeys(key)
	return keys[0], keys[1]
}

// lockKeys returns the Redis keys of an acquisition of key: its lock and
// its slot's fencing counter. Extend and Release use the first only.
func lockKeys(key string) []string {
	keys, _ := acquireCall(key, "", "", 0, 0)
	return keys
}

// lockName returns the Redis key of key's lock, as the package
// documentation says.
func lockName(key string) string {
	var buf [80]byte // on the stack: for most keys the string is the one allocation
	b := buf[:0]
	if n := lockNameLen(key); n > len(buf) {
		b = make([]byte, 0, n)
	}
	return string(appendLockName(b, key))
}

// lockNameLen returns len(lockName(key)).
func lockNameLen(key string) int {
	if !hasHashTag(key) && strings.IndexByte(key, '}') >= 0 {
		return len("dlm:x:{}") + hex.EncodedLen(len(key))
	}
	return len("dlm:{}") + len(key) // or "dlm:t:" and key
}

// appendLockName appends lockName(key) to b.
func appendLockName(b []byte, key string) []byte {
	switch {
	case hasHashTag(key):
		return append(append(b, "dlm:t:"...), key...)
	case strings.IndexByte(key, '}') >= 0:
		return append(hex.AppendEncode(append(b, "dlm:x:{"...), []byte(key)), '}')
	}
	return append(append(append(b, "dlm:{"...), key...), '}')
}

// hasHashTag reports whether Redis Cluster hashes key by a tag: a '{'
// followed, later, by a '}' with at least one byte between.
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	return i >= 0 && strings.IndexByte(key[i+1:], '}') > 0
}

// acquireCall returns the keys of an acquisition's script call on key
// (those of lockKeys) and its arguments (token, ttl in milliseconds) in one
// allocation besides the keys' text: it is on every lock call's path. With
// the amnesia guard (maxTTL > 0) the slot's quarantine marker and maxTTL in
// milliseconds follow; for a hand-off (from not empty), maxTTL ("0" when
// the guard is off) and from.
func acquireCall(key, token, from string, ttl, maxTTL time.Duration) (keys, args []string) {
	n := 2
	if maxTTL > 0 {
		n = 3
	}
	keys, args = lockCall(key, token, ttl, n)
	slot := eval.Slot(keys[0])
	keys[1] = fenceName(slot)
	if maxTTL > 0 {
		keys[2] = quarantineName(slot)
	}
	if maxTTL > 0 || from != "" {
		args = append(args, strconv.FormatInt(maxTTL.Milliseconds(), 10))
	}
	if from != "" {
		args = append(args, from)
	}
	return keys, args
}

// heldCall returns the keys (the lock key alone) and arguments (token, then
// ttl in milliseconds) of an extension. One key: during a Cluster slot
// migration a call naming a key that has not moved yet beside one that has
// gets TRYAGAIN.
func heldCall(key, token string, ttl time.Duration) (keys, args []string) {
	return lockCall(key, token, ttl, 1)
}

// releaseCall returns the script, keys and arguments of a release of key
// by token over node: the script for how node's client reaches its
// server, when it says, so that it publishes where its waiters listen
// without asking the server (release.lua).
func releaseCall(key, token string, node driver.Node) (s *eval.Script, keys, args []string) {
	keys, args = lockCall(key, token, 0, 1)
	return releaseScript(publishArg(nodekit.RoutingOf(node))), keys, args
}

// publishArg is announce.lua's mode for a node of the given routing.
func publishArg(r nodekit.Routing) string {
	switch r {
	case nodekit.RoutingBySlot:
		return "s"
	case nodekit.RoutingOneServer:
		return "p"
	}
	return ""
}

// lockCall returns a script call's keys (lockName(key) first, room for
// nkeys) and arguments (token, then ttl in milliseconds when positive) in
// one allocation besides the lock key's text.
func lockCall(key, token string, ttl time.Duration, nkeys int) (keys, args []string) {
	c := new(struct {
		keys [3]string
		args [4]string // room for acquireCall's maxTTL and from
	})
	c.keys[0] = lockName(key)
	c.args[0] = token
	if ttl <= 0 {
		return c.keys[:nkeys], c.args[:1]
	}
	c.args[1] = ms(ttl)
	return c.keys[:nkeys], c.args[:2]
}

// ms returns d in milliseconds as text. The last value is kept: a program
// passes the same TTL call after call.
func ms(d time.Duration) string {
	m := d.Milliseconds()
	if t := lastMS.Load(); t != nil && t.ms == m {
		return t.text
	}
	t := &msText{m, strconv.FormatInt(m, 10)}
	lastMS.Store(t)
	return t.text
}

type msText struct {
	ms   int64
	text string
}

var lastMS atomic.Pointer[msText]

const slots = 16384 // Redis Cluster hash slots

// fenceName returns the Redis key of the fencing counter of hash slot
// slot: "dlm:fence:{T}", T the first three-character string over [0-9a-zA-Z]
// (in that order) whose slot it is. The names are part of the storage
// format: every version must choose the same ones.
func fenceName(slot int) string {
	const n = len(fencePrefix) + 3 + 1
	names := fenceNames()
	return names[slot*n : (slot+1)*n]
}

// quarantineName returns the Redis key of the amnesia guard's quarantine
// marker of hash slot slot: "dlm:quarantine:{T}", T as in fenceName.
func quarantineName(slot int) string {
	return quarantinePrefix + fenceName(slot)[len(fencePrefix):]
}

const (
	fencePrefix      = "dlm:fence:{"
	quarantinePrefix = "dlm:quarantine:{"
)

// fenceNames returns every slot's counter name, in slot order, in one
// string (240 KiB), built at first use.
var fenceNames = sync.OnceValue(func() string {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var tags [slots][3]byte
	found := 0
	for _, a := range []byte(alphabet) {
		for _, b := range []byte(alphabet) {
			for _, c := range []byte(alphabet) {
				tag := [3]byte{a, b, c}
				if s := eval.Slot(string(tag[:])); tags[s][0] == 0 {
					tags[s] = tag
					found++
				}
			}
		}
	}
	if found != slots {
		panic("strategy: fence tags do not cover every slot") // checked by TestFenceNames
	}
	var b strings.Builder
	b.Grow(slots * (len(fencePrefix) + 4))
	for _, t := range tags {
		b.WriteString(fencePrefix)
		b.Write(t[:])
		b.WriteByte('}')
	}
	return b.String()
})
