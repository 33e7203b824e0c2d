package coalesce

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/dlmgo/dlm"
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

// BodyMark is a line that may part a merged script's source: the prelude
// before it (local functions, defined once per batch), the body after it
// (run once per call).
const BodyMark = "-- body\n"

// batchOf returns the batch form of a script that replies with an array of
// integers: ARGV[1] and ARGV[2] are each call's key and argument counts,
// KEYS and the rest of ARGV the calls' keys and arguments in turn. The
// reply holds, for each call, the length of its reply and its reply, or −1
// when it raised an error.
func batchOf(src string) string {
	prelude, body, ok := strings.Cut(src, BodyMark)
	if !ok {
		prelude, body = "", src
	}
	return prelude + "local function one(KEYS, ARGV)\n" + body + `
end
local nk, na, out, a = tonumber(ARGV[1]), tonumber(ARGV[2]), {}, 2
local keys, args = {}, {}
for k = 0, #KEYS - nk, nk do
  for i = 1, nk do keys[i] = KEYS[k + i] end
  for i = 1, na do args[i] = ARGV[a + i] end
  a = a + na
  local ok, r = pcall(one, keys, args)
  if ok and type(r) == 'table' then
    out[#out + 1] = #r
    for i = 1, #r do out[#out + 1] = r[i] end
  else
    out[#out + 1] = -1
  end
end
return out
`
}

// merger knows the batch forms of the scripts a Node merges.
type merger struct {
	batch      map[string]*batch // by the script's SHA1
	slots      bool              // merge only calls of one hash slot
	crossSlots atomic.Bool       // a one-server node refused keys of several slots: it is a Cluster node
}

// A batch is the batch form of a script.
type batch struct {
	*nodekit.Script
	// cached: the server ran it by EVALSHA, or by EVAL since it last
	// replied NOSCRIPT; until then it goes by EVAL, so that a RunWait
	// never meets NOSCRIPT in steady state (its WAIT would then be lost).
	cached atomic.Bool
}

func newMerger(routing nodekit.Routing, scripts []*nodekit.Script) *merger {
	if routing == nodekit.RoutingUnknown || len(scripts) == 0 {
		return nil
	}
	m := &merger{batch: make(map[string]*batch, len(scripts)), slots: routing == nodekit.RoutingBySlot}
	for _, s := range scripts {
		m.batch[s.SHA1()] = &batch{Script: nodekit.NewScript(batchOf(s.Source()))}
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
func (m *merger) plan(calls []dlm.Call) ([]dlm.Call, []group) {
	bySlot := m.slots || m.crossSlots.Load()
	var idx map[groupKey]int // → index in groups
	var groups []group
	seen := make(map[string]struct{}, len(calls))
	for i, c := range calls {
		if len(c.Keys) == 0 {
			continue
		}
		if _, again := seen[c.Keys[0]]; again {
			continue // not moved ahead of an earlier call of its key
		}
		seen[c.Keys[0]] = struct{}{}
		if c.SHA1 == "" || m.batch[c.SHA1] == nil {
			continue
		}
		k := groupKey{sha: c.SHA1, nk: len(c.Keys), na: len(c.Args), slot: -1}
		if bySlot {
			k.slot = nodekit.Slot(c.Keys[0])
		}
		if idx == nil {
			idx = make(map[groupKey]int)
		}
		g, ok := idx[k]
		if !ok {
			g = len(groups)
			idx[k] = g
			groups = append(groups, group{})
		}
		groups[g].members = append(groups[g].members, i)
	}
	merged := groups[:0]
	for _, g := range groups {
		if len(g.members) > 1 {
			merged = append(merged, g)
		}
	}
	if len(merged) == 0 {
		return calls, nil
	}
	inGroup := make([]bool, len(calls))
	sent := make([]dlm.Call, 0, len(calls))
	for gi := range merged {
		g := &merged[gi]
		first := calls[g.members[0]]
		nk, na := len(first.Keys), len(first.Args)
		keys := make([]string, 0, nk*len(g.members))
		args := make([]string, 2, 2+na*len(g.members))
		args[0], args[1] = strconv.Itoa(nk), strconv.Itoa(na)
		for _, i := range g.members {
			inGroup[i] = true
			keys = append(keys, calls[i].Keys...)
			args = append(args, calls[i].Args...)
		}
		g.sent, g.batch = len(sent), m.batch[first.SHA1]
		c := dlm.Call{Keys: keys, Args: args}
		if g.batch.cached.Load() {
			c.SHA1 = g.batch.SHA1()
		} else {
			c.Source = g.batch.Source()
		}
		sent = append(sent, c)
	}
	for i, c := range calls {
		if !inGroup[i] {
			sent = append(sent, dlm.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args})
		}
	}
	return sent, merged
}

// runMerged runs calls through run (the node's Run, or, when waits is set,
// its RunWait with one wait), merging what it can, and sets every call's
// Reply or Err. run gets the calls to send and where each of calls went
// among them (−1: not sent in this run; nil: each sent itself, in order).
// Calls sent again go through run too; the acknowledgements returned are
// then the least of the runs', and the error the first run's when it had
// one (a RunWait's caller then undoes its calls). A batch that
// met NOSCRIPT is sent again by EVAL after a Run; after a RunWait its
// calls fail with NOSCRIPT, which their callers handle (nodekit.Script).
func (m *merger) runMerged(ctx context.Context, calls []dlm.Call, waits bool, run func(sent []dlm.Call, where []int) (dlm.Acks, error)) (dlm.Acks, error) {
	sent, groups := m.plan(calls)
	if groups == nil {
		return run(calls, nil)
	}
	where := make([]int, len(calls))
	j := len(groups)
	for i := range where {
		where[i] = -1
	}
	for gi, g := range groups {
		for _, i := range g.members {
			where[i] = gi
		}
	}
	for i := range where {
		if where[i] < 0 {
			where[i], j = j, j+1
		}
	}
	acks, err := run(sent, where)
	// again sends cs, which carry the calls of calls listed in of (one list
	// per call of cs).
	again := func(cs []dlm.Call, of [][]int) {
		w := make([]int, len(calls))
		for i := range w {
			w[i] = -1
		}
		for k, is := range of {
			for _, i := range is {
				w[i] = k
			}
		}
		a, e := run(cs, w)
		acks.Replicas, acks.Local = min(acks.Replicas, a.Replicas), acks.Local && a.Local
		if err == nil {
			err = e
		}
	}
	var loads []int // batches the server had not cached: nothing of theirs ran
	for gi, g := range groups {
		switch e := sent[g.sent].Err; {
		case e == nil:
			g.batch.cached.Store(true)
		case errors.Is(e, dlm.ErrNoScript):
			g.batch.cached.Store(false)
			if !waits {
				loads = append(loads, gi)
			}
		}
	}
	if len(loads) > 0 {
		cs := make([]dlm.Call, len(loads))
		of := make([][]int, len(loads))
		for j, gi := range loads {
			c := sent[groups[gi].sent]
			cs[j] = dlm.Call{Source: groups[gi].batch.Source(), Keys: c.Keys, Args: c.Args}
			of[j] = groups[gi].members
		}
		again(cs, of)
		for j, gi := range loads {
			sent[groups[gi].sent].Reply, sent[groups[gi].sent].Err = cs[j].Reply, cs[j].Err
		}
	}
	for i := range calls {
		if where[i] >= len(groups) { // sent by itself
			calls[i].Reply, calls[i].Err = sent[where[i]].Reply, sent[where[i]].Err
		}
	}
	var retry []int // calls to send again by themselves
	for _, g := range groups {
		b := sent[g.sent]
		if b.Err != nil {
			if ctx.Err() != nil || errors.Is(b.Err, dlm.ErrNoScript) || !refusedAsWhole(b.Err) {
				for _, i := range g.members {
					calls[i].Reply, calls[i].Err = nil, b.Err
				}
				continue
			}
			if strings.Contains(b.Err.Error(), "CROSSSLOT") {
				m.crossSlots.Store(true)
			}
			retry = append(retry, g.members...)
			continue
		}
		r := b.Reply
		for _, i := range g.members {
			if len(r) == 0 || r[0] < 0 || r[0] > int64(len(r)-1) {
				retry = append(retry, i) // raised an error, or a malformed reply
				if len(r) > 0 && r[0] < 0 {
					r = r[1:]
				} else {
					r = nil
				}
				continue
			}
			n := int(r[0])
			calls[i].Reply, calls[i].Err = r[1:1+n:1+n], nil
			r = r[1+n:]
		}
	}
	if len(retry) > 0 && ctx.Err() == nil {
		cs := make([]dlm.Call, len(retry))
		of := make([][]int, len(retry))
		for j, i := range retry {
			cs[j] = dlm.Call{SHA1: calls[i].SHA1, Source: calls[i].Source, Keys: calls[i].Keys, Args: calls[i].Args}
			of[j] = []int{i}
		}
		again(cs, of)
		for j, i := range retry {
			calls[i].Reply, calls[i].Err = cs[j].Reply, cs[j].Err
		}
	} else {
		for _, i := range retry {
			calls[i].Reply, calls[i].Err = nil, ctx.Err()
		}
	}
	return acks, err
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
