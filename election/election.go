// Package election provides leader election over dlm, in the shape of
// etcd's concurrency.Election: Campaign waits to become leader, Resign
// steps down, Leader reads the current leader, Observe streams changes.
//
// Leadership is a lock on the election's name taken through a dlm.Manager,
// so a leader's term is its lock's fence (strictly greater than every
// earlier leader's) and its Context ends when leadership can no longer be
// trusted: the lease ran out, a renewal learnt it was lost, or Resign was
// called. Give the Manager dlm.WithAutoRenew so that a leader keeps its
// place for as long as it lives; a leader that dies or is cut off is
// replaced once its lease ends.
//
// The leader's value (its identity: an address, a host name) is kept
// beside the lock, on the same deployment, and every change is published
// on a channel there, so the strategy must keep its locks on one deployment
// (strategy.NewSingle or strategy.NewFailover). Redlock is not offered: reading
// a leader and streaming changes over independent masters would need
// quorum reads and a merged, ordered stream of their own.
//
// Keys: besides the lock, one small hash per election (the leader record),
// overwritten by each new leader and deleted by Resign.
package election

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/mgr"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

var (
	//go:embed announce.lua
	announceSource string
	//go:embed leader.lua
	leaderSource string

	announceScript = eval.NewScript(announceSource)
	leaderScript   = eval.NewScript(leaderSource)
)

// MaxValueLen bounds a leader's value.
const MaxValueLen = 256

// ErrNoLeader reports that an election has no announced leader.
var ErrNoLeader = errors.New("dlm: election has no leader")

// An Election is one named election. It is safe for concurrent use;
// Elections of the same name, in any process, are the same election.
type Election struct {
	m       *dlm.Manager
	node    driver.Node
	name    string
	keys    []string // the lock key, the leader record (also the channel)
	publish string   // announce.lua's ARGV[4]
}

// New returns the election name, run through m. m's strategy must keep its
// locks on one deployment (strategy.NewSingle, NewFailover); for any other the error matches
// dlm.ErrInvalid and errors.ErrUnsupported.
func New(m *dlm.Manager, name string) (*Election, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: election.New: nil Manager", dlm.ErrInvalid)
	}
	one, ok := mgr.Of(m).Strategy.(mgr.OneDeployment)
	if !ok {
		return nil, fmt.Errorf("%w: election.New: %T keeps its locks on more than one deployment: %w", dlm.ErrInvalid, mgr.Of(m).Strategy, errors.ErrUnsupported)
	}
	if err := mgr.CheckKey(name); err != nil {
		return nil, errs.Within("election.New", err)
	}
	lock, _ := strategy.Keys(name)
	e := &Election{m: m, node: one.Node(), name: name, keys: []string{lock, lock + ":leader"}, publish: "p"}
	if nodekit.RoutingOf(e.node) == nodekit.RoutingBySlot {
		e.publish = "s"
	}
	return e, nil
}

// A Leader is an election's leader as others see it.
type Leader struct {
	// Term is the leader's lock fence: greater than every earlier
	// leader's. It is 0 when there is no leader.
	Term  uint64
	Value string
}

// A Leadership is this process's term as leader.
type Leadership struct {
	e     *Election
	lock  *dlm.Lock
	value string
}

// Term returns the leadership's term, its lock's fence: pass it with every
// write the leader makes, so storage can refuse a deposed leader's.
func (l *Leadership) Term() uint64 { return l.lock.Fence() }

// Value returns the value this leader announced.
func (l *Leadership) Value() string { return l.value }

// Context returns a context that ends when the leadership can no longer be
// trusted (see dlm.Lock.Context), or at Resign.
func (l *Leadership) Context() context.Context { return l.lock.Context() }

// Lock returns the lock the leadership is.
func (l *Leadership) Lock() *dlm.Lock { return l.lock }

// Campaign waits until this caller is leader, or ctx ends (the error then
// matches dlm.ErrNotAcquired and ctx's error), then announces value to
// observers. value must be at most MaxValueLen bytes.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, false)
}

// TryCampaign makes one attempt to become leader: when another leads, or
// the lease ended before the announcement, the error matches
// dlm.ErrNotAcquired.
func (e *Election) TryCampaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, true)
}

func (e *Election) campaign(ctx context.Context, value string, once bool) (*Leadership, error) {
	if len(value) > MaxValueLen {
		return nil, fmt.Errorf("%w: election %q: value of %d bytes, at most %d", dlm.ErrInvalid, e.name, len(value), MaxValueLen)
	}
	lockFn := e.m.Lock
	if once {
		lockFn = e.m.TryLock
	}
	for {
		lock, err := lockFn(ctx, e.name)
		if err != nil {
			return nil, errs.Within(fmt.Sprintf("election %q", e.name), err)
		}
		l := &Leadership{e: e, lock: lock, value: value}
		ok, err := l.announce(ctx, "a")
		if ok {
			return l, nil
		}
		_ = lock.Unlock(context.WithoutCancel(ctx))
		if err != nil && (dlm.Permanent(err) || ctx.Err() != nil) {
			return nil, errs.Within(fmt.Sprintf("election %q: announce", e.name), err)
		}
		if once {
			return nil, fmt.Errorf("%w: election %q: the lease ended before the announcement: %w", dlm.ErrNotAcquired, e.name, cmp.Or(err, errors.New("not announced")))
		}
		// The lease ended before the announcement (or the reply was lost):
		// campaign again.
	}
}

// announce runs announce.lua in mode ("a" announce, "r" resign) and
// reports whether it took effect.
func (l *Leadership) announce(ctx context.Context, mode string) (bool, error) {
	held := mgr.LockValue(l.lock.Fence(), l.lock.Token())
	r, err := announceScript.Run(ctx, l.e.node, l.e.keys, held, mode, l.value, l.e.publish)
	if err != nil {
		return false, err
	}
	return len(r) == 1 && r[0] == 1, nil
}

// Resign ends the leadership: observers learn there is no leader, and the
// lock is released so that a campaigner takes over at once. The
// leadership's Context ends with dlm.ErrUnlocked.
//
// There is no resigning that keeps others out until a given time (as
// dlm.Lock.UnlockAt does for a lock): observers would see no leader while
// nobody may lead. Calling UnlockAt on Lock() leaves the leader record
// announcing this process until the key expires.
func (l *Leadership) Resign(ctx context.Context) error {
	_, err := l.announce(ctx, "r")
	uerr := l.lock.Unlock(ctx)
	if err != nil || uerr != nil {
		return errs.Within(fmt.Sprintf("election %q: resign", l.e.name), errors.Join(err, uerr))
	}
	return nil
}

// Leader returns the current leader, or an error matching ErrNoLeader when
// there is none (or its holder has not yet announced itself).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	ld, _, err := e.read(ctx)
	if err == nil && ld.Term == 0 {
		err = errs.Within(fmt.Sprintf("election %q", e.name), ErrNoLeader)
	}
	return ld, err
}

// read returns the leader (Term 0 for none) and how long its lock has
// left (0 when not held).
func (e *Election) read(ctx context.Context) (Leader, time.Duration, error) {
	r, err := leaderScript.Run(ctx, e.node, e.keys)
	if err != nil {
		return Leader{}, 0, errs.Within(fmt.Sprintf("election %q", e.name), err)
	}
	if len(r) == 0 || r[0] == 0 {
		return Leader{}, 0, nil
	}
	if r[0] == 2 && len(r) == 2 {
		return Leader{}, time.Duration(r[1]) * time.Millisecond, nil
	}
	if r[0] != 1 || len(r) < 3 {
		return Leader{}, 0, fmt.Errorf("dlm: election %q: unexpected reply %v", e.name, r)
	}
	value := make([]byte, len(r)-3)
	for i, b := range r[3:] {
		value[i] = byte(b)
	}
	return Leader{Term: uint64(r[2]), Value: string(value)}, time.Duration(r[1]) * time.Millisecond, nil
}

// Observe streams the election's leaders: first the current one (a Leader
// of Term 0 when there is none), then every change, in order, with terms
// that only grow, until ctx ends, when the channel closes. Changes come
// from the channel leaders publish on; the leader is also read again when
// its lease would end (a leader that died publishes nothing) and at least
// every TTL of the Manager, so a message lost while the subscription was
// re-established delays a change by at most that long (a leader that came
// and went within it is then not seen). A vacancy (Term 0) is reported
// after a leader resigned or its lease ended. The channel is buffered; an
// observer that does not keep up slows only itself.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 16)
	go e.observe(ctx, out)
	return out
}

func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	events := make(chan string, 64)
	missed := make(chan struct{}, 1)
	wctx, cancel := context.WithTimeout(ctx, e.m.TTL()) // else poll
	stop, err := e.node.Watch(wctx, e.keys[1], func(payload string) {
		select {
		case events <- payload:
		default: // full: read the leader instead
			select {
			case missed <- struct{}{}:
			default:
			}
		}
	})
	cancel()
	if err == nil {
		defer stop()
	}
	o := observer{out: out}
	timer := time.NewTimer(0) // read the current leader at once
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-events:
			l, resigned, ok := parseEvent(p)
			switch {
			case !ok:
			case resigned != 0:
				if resigned == o.cur.Term && !o.report(ctx, Leader{}) {
					return
				}
			case !o.report(ctx, l):
				return
			}
		case <-missed:
			timer.Reset(0)
		case <-timer.C:
			next := e.m.TTL()
			l, left, err := e.read(ctx)
			if err == nil {
				if left > 0 {
					next = min(next, left+time.Millisecond)
				}
				if !o.report(ctx, l) {
					return
				}
			}
			timer.Reset(next)
		}
	}
}

// An observer decides which leaders Observe reports.
type observer struct {
	out      chan<- Leader
	cur      Leader // the last reported (Term 0: a vacancy)
	maxTerm  uint64 // the highest term reported
	reported bool
}

// report sends l when it is a change: a leader of a term above every term
// reported, or a vacancy after a leader. It returns false once ctx ended.
func (o *observer) report(ctx context.Context, l Leader) bool {
	change := !o.reported || l.Term > o.maxTerm || l.Term == 0 && o.cur.Term != 0
	if !change {
		return true
	}
	select {
	case o.out <- l:
	case <-ctx.Done():
		return false
	}
	o.cur, o.reported = l, true
	o.maxTerm = max(o.maxTerm, l.Term)
	return true
}

// parseEvent reads a published change: "<term> <value>" for a new leader,
// "0 <term>" for a resignation (reported as resigned).
func parseEvent(p string) (l Leader, resigned uint64, ok bool) {
	termText, rest, found := strings.Cut(p, " ")
	if !found {
		return Leader{}, 0, false
	}
	term, err := strconv.ParseUint(termText, 10, 64)
	if err != nil {
		return Leader{}, 0, false
	}
	if term == 0 {
		resigned, err = strconv.ParseUint(rest, 10, 64)
		return Leader{}, resigned, err == nil && resigned != 0
	}
	return Leader{Term: term, Value: rest}, 0, true
}
