// Package strategy provides the locking algorithms of dlm: a single
// instance, Redlock over independent masters, and a primary with replicas
// behind Sentinel.
//
// Every strategy stores a lock for key K in one Redis key and its fencing
// counter in that key plus ":fence", both in one Redis Cluster hash slot:
//
//   - K has a hash tag of its own (a non-empty "{tag}", as Redis Cluster
//     reads it): "dlm:t:K", in the slot of the tag, so a lock can live
//     beside the data it guards;
//   - else K contains a '}': "dlm:x:{hex(K)}" (a '}' would end the tag);
//   - else "dlm:{K}".
//
// Fencing counters are never deleted: one small key stays per lock key ever
// used.
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
	"github.com/dlmgo/dlm/nodekit"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

func mustScript(name string) *nodekit.Script {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err) // the file is embedded at build time
	}
	return nodekit.NewScript(string(b))
}

var (
	acquireScript = mustScript("acquire.lua")
	extendScript  = mustScript("extend.lua")
	releaseScript = mustScript("release.lua")
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
// the per-node timeout, DefaultNodeTimeout (50ms) by default, and must be
// positive: a node that has not answered within it counts as failed.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: WithTimeout(%v): must not be negative", dlm.ErrInvalid, d)
		}
		c.timeout = d
		return nil
	}
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
	case dlm.CheckKey(key) != nil:
		return dlm.CheckKey(key)
	case token == "":
		return fmt.Errorf("%w: empty token", dlm.ErrInvalid)
	case !needTTL:
		return nil
	case ttl < time.Millisecond:
		return fmt.Errorf("%w: TTL %v is below Redis' 1ms resolution", dlm.ErrInvalid, ttl)
	case ttl > dlm.MaxTTL:
		return fmt.Errorf("%w: TTL %v is above dlm.MaxTTL (%v)", dlm.ErrInvalid, ttl, dlm.MaxTTL)
	case ttl <= c.driftMargin(ttl):
		return fmt.Errorf("%w: TTL %v is not above its clock-drift margin %v", dlm.ErrInvalid, ttl, c.driftMargin(ttl))
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

// lockKeys returns the Redis keys of key's lock and fencing counter.
func lockKeys(key string) []string {
	lock, fence := lockNames(key)
	return []string{lock, fence}
}

// lockNames returns the Redis keys of key's lock and fencing counter, as
// the package documentation says; the lock key is a prefix of the
// counter's, so both share one allocation.
func lockNames(key string) (lock, fence string) {
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

// lockCall returns the keys of a script call on key (those of lockKeys) and
// its arguments (token, then ttl in milliseconds when ttl > 0) in one
// allocation besides the keys' text: it is on every lock call's path.
func lockCall(key, token string, ttl time.Duration) (keys, args []string) {
	c := new(struct{ keys, args [2]string })
	c.keys[0], c.keys[1] = lockNames(key)
	c.args[0] = token
	if ttl <= 0 {
		return c.keys[:], c.args[:1]
	}
	c.args[1] = ms(ttl)
	return c.keys[:], c.args[:]
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
