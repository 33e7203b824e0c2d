// Merging calls of one script into one invocation of its batch form.

package eval

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/nodekit"
)

// Merging: calls of one script with the same number of keys and arguments,
// in one Run, bound for one server, go as one invocation of a batch form of
// the script that runs each of them in turn. A Redis server spends more on
// invoking a small script than on the commands inside it, so a lock pair
// costs it about half as much in batches (BenchmarkCoalescing's server
// µs/pair). Each call keeps its own keys, arguments and reply; one that
// raises an error inside the batch, or whose batch the server refuses as a
// whole (CROSSSLOT, TRYAGAIN, MOVED: keys of several slots, or of a slot in
// migration), is sent again by itself, so its caller sees the server's own
// reply.
//
// Merged calls go ahead of the calls sent by themselves, so only the first
// call of each key in a Run may merge: every key's calls keep their order
// (an undo's release must not overtake its acquisition). Calls of different
// keys may be reordered.

// merger knows the batch forms of the scripts a Node merges.
type merger struct {
	batch      map[string]*batch // by the script's SHA1
	slots      bool              // merge only calls of one hash slot
	crossSlots atomic.Bool       // a one-server node refused keys of several slots: it is a Cluster node
}

// A batch is the batch form of a script.
type batch struct {
	*Script
	// cached: the server ran it by EVALSHA, or by EVAL since it last
	// replied NOSCRIPT; until then it goes by EVAL, so that a RunWait
	// never meets NOSCRIPT in steady state (its WAIT would then be lost).
	cached atomic.Bool
}

func newMerger(routing nodekit.Routing, scripts []*Script) *merger {
	if routing == nodekit.RoutingUnknown || len(scripts) == 0 {
		return nil
	}
	m := &merger{batch: make(map[string]*batch, len(scripts)), slots: routing == nodekit.RoutingBySlot}
	for _, s := range scripts {
		m.batch[s.SHA1()] = &batch{Script: NewScript(batchOf(s.Source()))}
	}
	return m
}

// A group is calls that share one batch invocation.
type group struct {
	members []int // indexes in the caller's calls
	sent    int   // index of the batch call in the calls sent
	batch   *batch
}

type groupKey struct {
	sha    string
	nk, na int
	slot   int
}

// plan returns the calls to send for calls, and the groups merged among
// them; it returns calls itself when nothing merges.
func (m *merger) plan(calls []driver.Call) ([]driver.Call, []group) {
	merged := m.groups(calls)
	if len(merged) == 0 {
		return calls, nil
	}
	inGroup := make([]bool, len(calls))
	sent := make([]driver.Call, 0, len(calls))
	for gi := range merged {
		g := &merged[gi]
		first := calls[g.members[0]]
		nk, na := len(first.Keys), len(first.Args)
		keys := make([]string, 0, nk*len(g.members))
		args := make([]string, 2, 2+na*len(g.members))
		args[0], args[1] = countText(nk), countText(na)
		for _, i := range g.members {
			inGroup[i] = true
			keys = append(keys, calls[i].Keys...)
			args = append(args, calls[i].Args...)
		}
		g.sent, g.batch = len(sent), m.batch[first.SHA1]
		c := driver.Call{Keys: keys, Args: args}
		if g.batch.cached.Load() {
			c.SHA1 = g.batch.SHA1()
		} else {
			c.Source = g.batch.Source()
		}
		sent = append(sent, c)
	}
	for i, c := range calls {
		if !inGroup[i] {
			sent = append(sent, driver.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args})
		}
	}
	return sent, merged
}

// groups returns the groups of two or more of calls that may share one
// batch invocation: the first call of each key, of one merged script, with
// as many keys and arguments, and, where the node routes by slot, of one
// slot.
func (m *merger) groups(calls []driver.Call) []group {
	bySlot := m.slots || m.crossSlots.Load()
	// Small batches, the usual ones, look keys and groups up by scanning:
	// a map costs its allocation and its random seed on every batch.
	var seen map[string]struct{}
	if len(calls) > smallPlan {
		seen = make(map[string]struct{}, len(calls))
	}
	var groups []group
	var index groupIndex
	for i, c := range calls {
		if len(c.Keys) == 0 {
			continue
		}
		if seenKey(seen, calls[:i], c.Keys[0]) {
			continue // not moved ahead of an earlier call of its key
		}
		if seen != nil {
			seen[c.Keys[0]] = struct{}{}
		}
		if c.SHA1 == "" || m.batch[c.SHA1] == nil {
			continue
		}
		k := groupKey{sha: c.SHA1, nk: len(c.Keys), na: len(c.Args), slot: -1}
		if bySlot {
			k.slot = Slot(c.Keys[0])
		}
		g, ok := index.find(k)
		if !ok {
			g = len(groups)
			groups = append(groups, group{})
			index.add(k, g)
		}
		groups[g].members = append(groups[g].members, i)
	}
	merged := groups[:0]
	for _, g := range groups {
		if len(g.members) > 1 {
			merged = append(merged, g)
		}
	}
	return merged
}

// A groupIndex finds a group by its key: by scanning while there are
// smallPlan groups or fewer, then in a map.
type groupIndex struct {
	keys  []groupKey // of groups, while byKey is nil
	byKey map[groupKey]int
}

func (x *groupIndex) find(k groupKey) (int, bool) {
	if x.byKey != nil {
		g, ok := x.byKey[k]
		return g, ok
	}
	g := slices.Index(x.keys, k)
	return g, g >= 0
}

// add records that group g has key k; groups are added in order.
func (x *groupIndex) add(k groupKey, g int) {
	switch {
	case x.byKey != nil:
		x.byKey[k] = g
	case len(x.keys) < smallPlan:
		x.keys = append(x.keys, k)
	default:
		x.byKey = make(map[groupKey]int, 2*smallPlan)
		for j, kj := range x.keys {
			x.byKey[kj] = j
		}
		x.byKey[k] = g
	}
}

// smallPlan is the most calls (and groups) plan looks up by scanning.
const smallPlan = 16

// seenKey reports whether key is the first key of a call of before: in
// seen when it is not nil, else by scanning before.
func seenKey(seen map[string]struct{}, before []driver.Call, key string) bool {
	if seen != nil {
		_, ok := seen[key]
		return ok
	}
	for _, c := range before {
		if len(c.Keys) > 0 && c.Keys[0] == key {
			return true
		}
	}
	return false
}

// runMerged runs calls through run (the node's Run, or, when waits is set,
// its RunWait with one wait), merging what it can, and sets every call's
// Reply or Err. run gets the calls to send and where each of calls went
// among them (−1: not sent in this run; nil: each sent itself, in order).
// Calls sent again go through run too; the acknowledgements returned are
// then the least of the runs', and the error the first run's when it had
// one (a RunWait's caller then undoes its calls). A batch that
// met NOSCRIPT is sent again by EVAL after a Run; after a RunWait its
// calls fail with NOSCRIPT, which their callers handle (Script).
func (m *merger) runMerged(ctx context.Context, calls []driver.Call, waits bool, run func(sent []driver.Call, where []int) (driver.Acks, error)) (driver.Acks, error) {
	sent, groups := m.plan(calls)
	if groups == nil {
		return run(calls, nil)
	}
	r := &mergedRun{m: m, calls: calls, sent: sent, groups: groups, run: run}
	where := r.where()
	r.acks, r.err = run(sent, where)
	r.loadScripts(waits)
	for i := range calls {
		if where[i] >= len(groups) { // sent by itself
			calls[i].Reply, calls[i].Err = sent[where[i]].Reply, sent[where[i]].Err
		}
	}
	r.sendAlone(ctx, r.unpack(ctx))
	return r.acks, r.err
}

// A mergedRun is one runMerged's state: the caller's calls, the calls sent
// for them, the groups merged, and the results of its runs so far.
type mergedRun struct {
	m      *merger
	calls  []driver.Call
	sent   []driver.Call
	groups []group
	run    func(sent []driver.Call, where []int) (driver.Acks, error)
	acks   driver.Acks
	err    error
}

// where maps each call to the call of sent that carries it: its group's
// batch call, or its own, which plan puts after the batches in order.
func (r *mergedRun) where() []int {
	where := make([]int, len(r.calls))
	for i := range where {
		where[i] = -1
	}
	for gi, g := range r.groups {
		for _, i := range g.members {
			where[i] = gi
		}
	}
	j := len(r.groups)
	for i := range where {
		if where[i] < 0 {
			where[i], j = j, j+1
		}
	}
	return where
}

// again sends cs, which carry the calls listed in of (one list per call of
// cs), and folds the run's acknowledgements and error into r's.
func (r *mergedRun) again(cs []driver.Call, of [][]int) {
	w := make([]int, len(r.calls))
	for i := range w {
		w[i] = -1
	}
	for k, is := range of {
		for _, i := range is {
			w[i] = k
		}
	}
	a, e := r.run(cs, w)
	r.acks.Replicas, r.acks.Local = min(r.acks.Replicas, a.Replicas), r.acks.Local && a.Local
	if r.err == nil {
		r.err = e
	}
}

// loadScripts notes which batch forms the server has cached, and, unless
// the run waited (a WAIT would be lost), sends by EVAL the batches that met
// NOSCRIPT: nothing of theirs ran.
func (r *mergedRun) loadScripts(waits bool) {
	var loads []int
	for gi, g := range r.groups {
		switch e := r.sent[g.sent].Err; {
		case e == nil:
			g.batch.cached.Store(true)
		case errors.Is(e, driver.ErrNoScript):
			g.batch.cached.Store(false)
			if !waits {
				loads = append(loads, gi)
			}
		}
	}
	if len(loads) == 0 {
		return
	}
	cs := make([]driver.Call, len(loads))
	of := make([][]int, len(loads))
	for j, gi := range loads {
		c := r.sent[r.groups[gi].sent]
		cs[j] = driver.Call{Source: r.groups[gi].batch.Source(), Keys: c.Keys, Args: c.Args}
		of[j] = r.groups[gi].members
	}
	r.again(cs, of)
	for j, gi := range loads {
		r.sent[r.groups[gi].sent].Reply, r.sent[r.groups[gi].sent].Err = cs[j].Reply, cs[j].Err
	}
}

// unpack gives each merged call its reply from its batch's, or its
// batch's error, and returns the calls to send again by themselves: those
// that raised an error inside the batch, and those of a batch the server
// refused as a whole.
func (r *mergedRun) unpack(ctx context.Context) (retry []int) {
	for _, g := range r.groups {
		b := r.sent[g.sent]
		if b.Err != nil {
			if ctx.Err() != nil || errors.Is(b.Err, driver.ErrNoScript) || !refusedAsWhole(b.Err) {
				for _, i := range g.members {
					r.calls[i].Reply, r.calls[i].Err = nil, b.Err
				}
				continue
			}
			if strings.Contains(b.Err.Error(), "CROSSSLOT") {
				r.m.crossSlots.Store(true)
			}
			retry = append(retry, g.members...)
			continue
		}
		reply := b.Reply
		for _, i := range g.members {
			if len(reply) == 0 || reply[0] < 0 || reply[0] > int64(len(reply)-1) {
				retry = append(retry, i) // raised an error, or a malformed reply
				if len(reply) > 0 && reply[0] < 0 {
					reply = reply[1:]
				} else {
					reply = nil
				}
				continue
			}
			n := int(reply[0])
			r.calls[i].Reply, r.calls[i].Err = reply[1:1+n:1+n], nil
			reply = reply[1+n:]
		}
	}
	return retry
}

// sendAlone sends the calls listed in retry again, each by itself, or,
// once ctx has ended, fails them with its error.
func (r *mergedRun) sendAlone(ctx context.Context, retry []int) {
	if ctx.Err() != nil {
		for _, i := range retry {
			r.calls[i].Reply, r.calls[i].Err = nil, ctx.Err()
		}
		return
	}
	if len(retry) == 0 {
		return
	}
	cs := make([]driver.Call, len(retry))
	of := make([][]int, len(retry))
	for j, i := range retry {
		c := r.calls[i]
		cs[j] = driver.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args}
		of[j] = []int{i}
	}
	r.again(cs, of)
	for j, i := range retry {
		r.calls[i].Reply, r.calls[i].Err = cs[j].Reply, cs[j].Err
	}
}

// refusedAsWhole reports whether err is a server's refusal of a batch call
// for the keys it names together, before it ran anything.
func refusedAsWhole(err error) bool {
	s := err.Error()
	for _, p := range []string{"CROSSSLOT", "TRYAGAIN", "MOVED", "ASK "} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}
