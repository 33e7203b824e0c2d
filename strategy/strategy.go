// Package strategy provides the locking algorithms of dlm: a single
// instance, Redlock over independent masters, and a primary with replicas
// behind Sentinel.
//
// Every strategy stores a lock for key K in one Redis key, whose value is
// the lock's fence and the holder's token ("<fence>:<token>"):
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
// ever locked. Earlier versions kept a counter per lock key (the lock key
// plus ":fence"); an acquisition folds such a counter into its slot's
// counter and deletes it, so fences never go back across the upgrade. Do
// not run earlier versions beside this one on the same keys.
package strategy

import (
	"context"
	"embed"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/coalesce"
	"github.com/dlmgo/dlm/nodekit"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// mustScript returns the embedded script file name, after the files of
// prelude (a script reading a lock's value starts with "held.lua") and,
// unless the file has one of its own, the line coalesce.BodyMark.
func mustScript(name string, prelude ...string) *nodekit.Script {
	var src []byte
	for i, n := range append(prelude, name) {
		b, err := scriptFS.ReadFile("scripts/" + n)
		if err != nil {
			panic(err) // the file is embedded at build time
		}
		if i == len(prelude) && !strings.Contains(string(b), coalesce.BodyMark) {
			src = append(src, coalesce.BodyMark...)
		}
		src = append(src, b...)
	}
	return nodekit.NewScript(string(src))
}

var (
	acquireScript = mustScript("acquire.lua", "held.lua", "amnesia.lua")
	extendScript  = mustScript("extend.lua", "held.lua")
	releaseScript = mustScript("release.lua", "held.lua", "announce.lua")
)

// DefaultDriftFactor is the default share of the TTL taken off a lease's
// validity for clock drift between client and servers.
const DefaultDriftFactor = 0.01

// minDrift is added to the drift margin for the granularity of Redis expiry.
const minDrift = 2 * time.Millisecond

// An Option configures a strategy. A constructor rejects an option that does
// not apply to its strategy or whose value is bad.
type Option func(*config) error

type config struct {
	driftFactor float64
	timeout     time.Duration
	timeoutSet  bool            // WithTimeout was given
	maxTTL      time.Duration   // the amnesia guard; 0: off
	alone       bool            // WithCoalescing(false): every call goes out by itself
	failover    *failoverConfig // set by NewFailover; its options need it
}

func defaultConfig() config { return config{driftFactor: DefaultDriftFactor} }

// WithDriftFactor sets the share of the TTL taken off every lease for clock
// drift; the margin is TTL×f + 2ms. The default is DefaultDriftFactor (0.01).
// f must be in [0, 0.5).
func WithDriftFactor(f float64) Option {
	return func(c *config) error {
		if !(f >= 0 && f < 0.5) {
			return fmt.Errorf("%w: WithDriftFactor(%v): must be in [0, 0.5)", dlm.ErrInvalid, f)
		}
		c.driftFactor = f
		return nil
	}
}

// WithTimeout bounds every call to a node. For the single-instance strategy
// the default, 0, leaves the bound to the caller's context. For Redlock it is
// the per-node timeout and must be positive: a node that has not answered
// within it counts as failed. Without WithTimeout, Redlock's per-node
// timeout adapts to the nodes' latency (see NewRedlock).
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithTimeout(%v): must not be negative", dlm.ErrInvalid, d)
		}
		c.timeout, c.timeoutSet = d, true
		return nil
	}
}

// WithMaxTTL turns the amnesia guard on: d is the longest lease any client
// of these keys takes (every client must be configured alike), and a TTL
// above it is refused with ErrInvalid. A hash slot whose state a node lost
// — a restart without persistence, FLUSHALL, an empty replica promoted,
// eviction — grants nothing on that node until d has passed, so that no
// lease it forgot can still be running; and fences on a slot that lost its
// counter start again above the old ones. See the README's "Amnesia" section for
// how a node that lost its data is told from a new one, and what it costs.
// d must be positive and at most dlm.MaxTTL. By default the guard is off.
func WithMaxTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > dlm.MaxTTL {
			return fmt.Errorf("%w: WithMaxTTL(%v): must be positive and at most %v", dlm.ErrInvalid, d, dlm.MaxTTL)
		}
		c.maxTTL = d
		return nil
	}
}

// WithCoalescing(false) sends every call to a node by itself. By default
// concurrent calls bound for one node — acquisitions, extensions and
// releases of any keys, from any goroutine — go out together while earlier
// calls are in flight: one pipelined round trip, over any driver, in which
// the calls of one script bound for one server (nodekit.Router says which)
// run as one script invocation. An uncontended call never waits for
// company. Turn it off only to measure what it gains.
func WithCoalescing(on bool) Option {
	return func(c *config) error {
		c.alone = !on
		return nil
	}
}

// coalesced returns node with its calls coalesced, unless
// WithCoalescing(false) was given.
func (c *config) coalesced(node dlm.Node) dlm.Node {
	if c.alone {
		return node
	}
	return coalesce.New(node, 0, acquireScript, extendScript, releaseScript)
}

func applyOptions(c *config, opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: nil Option", dlm.ErrInvalid)
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// isNil reports whether n is nil or a nil pointer in an interface.
func isNil(n dlm.Node) bool {
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

// driftMargin is the validity taken off a lease of the given TTL.
func (c *config) driftMargin(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + minDrift
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

// withTimeout applies the per-node timeout, if any, to ctx.
func (c *config) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeout(ctx, c.timeout)
	}
	return ctx, func() {}
}

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

// lockKeys returns the Redis keys of an acquisition of key: its lock, its
// slot's fencing counter, and the per-key counter of earlier versions.
// Extend and Release use the first only.
func lockKeys(key string) []string {
	keys, _ := acquireCall(key, "", "", 0, 0)
	return keys
}

// lockName returns the Redis key of key's lock, as the package
// documentation says.
func lockName(key string) string {
	lock, _ := lockNames(key)
	return lock
}

// lockNames returns the Redis keys of key's lock and of the counter earlier
// versions kept for it; the lock key is a prefix of the counter's, so both
// share one allocation.
func lockNames(key string) (lock, legacy string) {
	var f string
	switch {
	case hasHashTag(key):
		f = "dlm:t:" + key + ":fence"
	case strings.IndexByte(key, '}') >= 0:
		f = "dlm:x:{" + hex.EncodeToString([]byte(key)) + "}:fence"
	default:
		f = "dlm:{" + key + "}:fence"
	}
	return f[:len(f)-len(":fence")], f
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
	n := 3
	if maxTTL > 0 {
		n = 4
	}
	keys, args = lockCall(key, token, ttl, n)
	slot := nodekit.Slot(keys[0])
	keys[1] = fenceName(slot)
	if maxTTL > 0 {
		keys[3] = quarantineName(slot)
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

// releaseCall returns the keys and arguments of a release of key by token
// over node: with how node's client reaches its server, when it says, so
// that the release script publishes where its waiters listen without
// asking the server (release.lua).
func releaseCall(key, token string, node dlm.Node) (keys, args []string) {
	keys, args = lockCall(key, token, 0, 1)
	if p := publishArg(nodekit.RoutingOf(node)); p != "" {
		args = append(args, p) // within lockCall's allocation
	}
	return keys, args
}

// publishArg is release.lua's ARGV[2] for a node of the given routing.
func publishArg(r nodekit.Routing) string {
	switch r {
	case nodekit.RoutingBySlot:
		return "s"
	case nodekit.RoutingOneServer:
		return "p"
	}
	return ""
}

func lockCall(key, token string, ttl time.Duration, nkeys int) (keys, args []string) {
	c := new(struct {
		keys [4]string
		args [4]string // room for acquireCall's maxTTL and from
	})
	c.keys[0], c.keys[2] = lockNames(key)
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

// errReply reports a script reply of an unexpected shape.
func errReply(r []int64) error { return fmt.Errorf("dlm: unexpected script reply %v", r) }

// LockValue returns what the key of a lock held by token with the given
// fence holds on the servers of Single and Failover, "<fence>:<token>",
// for scripts of primitives built beside the lock (package election) that
// check a lock is still held.
func LockValue(fence uint64, token string) string {
	return strconv.FormatUint(fence, 10) + ":" + token
}
