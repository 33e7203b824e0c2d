package sim

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/sha1"
	"github.com/dlmgo/dlm/semaphore"
	"github.com/dlmgo/dlm/strategy"
)

// A Bug is a bug planted in the strategies, by wrappers around their Nodes
// or around the Strategy (the strategies' code is not touched), so that
// tests show the simulator finds it.
type Bug int

const (
	None Bug = iota
	// NoDrift: a lease's validity computed without the drift allowance
	// (Lease.Until stretched by TTL×DefaultDriftFactor + 2ms).
	NoDrift
	// OneNodeFence: Redlock's fence taken from the first node that
	// granted, not the largest of the quorum.
	OneNodeFence
	// RenewIgnoresRefusal: an extension a server refuses is taken as
	// granted.
	RenewIgnoresRefusal
	// HandoffNoCheck: a hand-off takes the lock from whoever holds it,
	// not only from the token handing it over.
	HandoffNoCheck
	// GuardVotesAtOnce: the amnesia guard lets a quarantined (restarted
	// empty) server grant at once.
	GuardVotesAtOnce
	// FairJumpsQueue: a fair waiter tries the lock wherever it stands in
	// the queue, as if it were the head.
	FairJumpsQueue
	// SemExtraPermit: client 0 takes permit 0 of the semaphore on a key of
	// its own (a permit more than the others count), sharing its fence
	// counter, so that only the count of holders shows it.
	SemExtraPermit
	// WriterIgnoresReaders: an rwlock writer takes the readers' permits
	// whoever holds them (a refusal is read as a grant, with a fresh fence).
	WriterIgnoresReaders
)

func (b Bug) String() string {
	return [...]string{"none", "no-drift", "one-node-fence", "renew-ignores-refusal", "handoff-no-check", "guard-votes-at-once",
		"fair-jumps-queue", "sem-extra-permit", "writer-ignores-readers"}[b]
}

// plantState is what a bug's wrappers share within one client.
type plantState struct {
	mu     sync.Mutex
	fences map[string]uint64 // token → fence a node granted it (first, or written back)
}

func newPlantState() *plantState { return &plantState{fences: map[string]uint64{}} }

func (p *plantState) first(token string, f int64) {
	p.mu.Lock()
	if _, ok := p.fences[token]; !ok {
		p.fences[token] = uint64(f)
	}
	p.mu.Unlock()
}

func (p *plantState) set(token string, f uint64) {
	p.mu.Lock()
	p.fences[token] = f
	p.mu.Unlock()
}

func (p *plantState) get(token string) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.fences[token]
	return f, ok
}

// sources maps a script's SHA1 to its source: a call sent by EVALSHA
// carries only the digest, and the first call of a script on a server
// (answered NOSCRIPT) is sent again with its source.
var sources sync.Map

// source returns the source of c's script, when known.
func source(c *driver.Call) string {
	if c.Source != "" {
		sources.LoadOrStore(sha1.Hex(c.Source), c.Source)
		return c.Source
	}
	if v, ok := sources.Load(c.SHA1); ok {
		return v.(string)
	}
	return ""
}

// Which script a call runs, from its source and shape (coalescing is off
// under a bug, so that calls are not merged).
func isAcquire(c *driver.Call) bool { return strings.Contains(source(c), "INCR") && len(c.Keys) >= 2 }
func isExtend(c *driver.Call) bool {
	src := source(c)
	return strings.Contains(src, "PEXPIRE") && !strings.Contains(src, "INCR") && len(c.Keys) == 1 && len(c.Args) == 2
}
func isFenceWrite(c *driver.Call) bool {
	src := source(c)
	return src != "" && !strings.Contains(src, "INCR") && len(c.Keys) == 2 && len(c.Args) == 2
}

// bugNode is a driver.Node with a bug planted.
type bugNode struct {
	*dlmtest.Node
	bug    Bug
	srv    *dlmtest.Server
	client int
	index  int
	p      *plantState
}

func plantNode(b Bug, n *dlmtest.Node, srv *dlmtest.Server, client, index int, p *plantState) driver.Node {
	switch b {
	case OneNodeFence, RenewIgnoresRefusal, HandoffNoCheck, GuardVotesAtOnce, FairJumpsQueue, WriterIgnoresReaders:
		return &bugNode{Node: n, bug: b, srv: srv, client: client, index: index, p: p}
	case SemExtraPermit:
		if client == 0 {
			return &bugNode{Node: n, bug: b, srv: srv, client: client, index: index, p: p}
		}
	}
	return n
}

// The lock keys (as the strategies name them) of permit 0 of the
// semaphore and of a permit past its last, and of the rwlock's readers'
// permits.
var (
	semPermit0, _ = strategy.Keys(semaphore.PermitKey(semName, 0))
	semExtra, _   = strategy.Keys(semaphore.PermitKey(semName, Permits))
	readPermits   = func() map[string]bool {
		m := map[string]bool{}
		for i := range Permits {
			k, _ := strategy.Keys(semaphore.PermitKey(rwName+":read", i))
			m[k] = true
		}
		return m
	}()
)

func (n *bugNode) before(calls []driver.Call) {
	if n.bug == SemExtraPermit {
		for i := range calls {
			c := &calls[i]
			if len(c.Keys) > 0 && c.Keys[0] == semPermit0 {
				c.Keys = append([]string(nil), c.Keys...)
				c.Keys[0] = semExtra // the fence counter (Keys[1]) stays
			}
		}
		return
	}
	if n.bug != HandoffNoCheck {
		return
	}
	for i := range calls {
		c := &calls[i]
		if isAcquire(c) && len(c.Args) == 4 {
			// Skip the token check: hand over from whoever holds it.
			if v, err := n.srv.Do("GET", c.Keys[0]); err == nil {
				if s, ok := v.(string); ok {
					if j := strings.IndexByte(s, ':'); j >= 0 {
						c.Args = append([]string(nil), c.Args...)
						c.Args[3] = s[j+1:]
					}
				}
			}
		}
	}
}

func (n *bugNode) after(ctx context.Context, calls []driver.Call) {
	for i := range calls {
		c := &calls[i]
		if c.Err != nil {
			continue
		}
		switch n.bug {
		case FairJumpsQueue:
			if isQueue(c) && len(c.Reply) == 3 && c.Reply[0] > 0 {
				c.Reply = []int64{0, c.Reply[1], c.Reply[2]}
			}
		case WriterIgnoresReaders:
			if ctx.Value(writerKey{}) != nil && isAcquire(c) && readPermits[c.Keys[0]] && len(c.Reply) == 2 && c.Reply[0] == 0 {
				if f, err := n.srv.Do("INCR", c.Keys[1]); err == nil {
					c.Reply = []int64{f.(int64)} // a grant: the fence alone
				}
			}
		case OneNodeFence:
			if isAcquire(c) && len(c.Reply) == 1 {
				n.p.first(c.Args[0], c.Reply[0])
			}
		case RenewIgnoresRefusal:
			if isAcquire(c) && len(c.Reply) == 1 {
				n.p.first(c.Args[0], c.Reply[0])
			}
			if isFenceWrite(c) {
				if f, err := strconv.ParseUint(c.Args[0], 10, 64); err == nil {
					n.p.set(c.Args[1], f)
				}
			}
			if isExtend(c) && len(c.Reply) == 2 && c.Reply[0] == 0 {
				if f, ok := n.p.get(c.Args[0]); ok {
					c.Reply = []int64{int64(f)}
				}
			}
		case GuardVotesAtOnce:
			if isAcquire(c) && len(c.Reply) == 2 && c.Reply[0] == 2 {
				again := *c
				again.Args = append([]string(nil), c.Args...)
				again.Args[2] = "0" // the guard off for this call
				again.Reply, again.Err = nil, nil
				one := []driver.Call{again}
				n.Node.Run(ctx, one)
				c.Reply, c.Err = one[0].Reply, one[0].Err
			}
		}
	}
}

func (n *bugNode) Run(ctx context.Context, calls []driver.Call) {
	n.before(calls)
	n.Node.Run(ctx, calls)
	n.after(ctx, calls)
}

func (n *bugNode) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	n.before(calls)
	a, err := n.Node.RunWait(ctx, calls, w)
	n.after(ctx, calls)
	return a, err
}

// plantStrategy wraps s for the bugs planted at the strategy.
func plantStrategy(b Bug, s driver.Strategy, ttl time.Duration, p *plantState) driver.Strategy {
	switch b {
	case NoDrift:
		margin := time.Duration(float64(ttl)*strategy.DefaultDriftFactor) + 2*time.Millisecond
		return &bugStrategy{h: s.(driver.Handoff), fix: func(_ string, l driver.Lease) driver.Lease {
			l.Until = l.Until.Add(margin)
			return l
		}}
	case OneNodeFence:
		return &bugStrategy{h: s.(driver.Handoff), fix: func(token string, l driver.Lease) driver.Lease {
			if f, ok := p.get(token); ok {
				l.Fence = f
			}
			return l
		}}
	}
	return s
}

// bugStrategy rewrites the leases of acquisitions (fix gets the token).
type bugStrategy struct {
	h   driver.Handoff
	fix func(token string, l driver.Lease) driver.Lease
}

func (s *bugStrategy) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.h.Acquire(ctx, key, token, ttl)
	if err == nil {
		l = s.fix(token, l)
	}
	return l, err
}

func (s *bugStrategy) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.h.Handoff(ctx, key, from, to, ttl)
	if err == nil {
		l = s.fix(to, l)
	}
	return l, err
}

func (s *bugStrategy) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.h.Extend(ctx, key, token, ttl)
	if err == nil {
		l = s.fix(token, l)
	}
	return l, err
}

func (s *bugStrategy) ExtendMany(ctx context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	rs := s.h.ExtendMany(ctx, locks, ttl)
	for i := range rs {
		if rs[i].Err == nil {
			rs[i].Lease = s.fix(locks[i].Token, rs[i].Lease)
		}
	}
	return rs
}

func (s *bugStrategy) Release(ctx context.Context, key, token string) error {
	return s.h.Release(ctx, key, token)
}

func (s *bugStrategy) WatchRelease(ctx context.Context, key string, notify func()) (func(), error) {
	return s.h.WatchRelease(ctx, key, notify)
}
