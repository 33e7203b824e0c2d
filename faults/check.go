package faults

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Counts is what the checker found in a run's history.
type Counts struct {
	Attempts int `json:"attempts"` // Lock calls
	Grants   int `json:"grants"`   // of which granted
	Missed   int `json:"missed"`   // of which ended without a lock (deadline, error)
	// Handoffs counts grants handed over by an Unlock of the client's
	// process (Cell.Workers).
	Handoffs int `json:"handoffs,omitempty"`
	// SeveralKeys counts grants of holds made of several locks: a
	// read-write lock's writers, multi-key locks.
	SeveralKeys int `json:"several_keys,omitempty"`
	// LongestWaitMs is the longest a granted Lock call waited.
	LongestWaitMs int64 `json:"longest_wait_ms"`

	// Overlaps counts grants made while another client's lease of the
	// same key was still valid (before its Until, its Unlock, or its
	// Context's end).
	Overlaps int `json:"overlaps"`
	// MostHolders is the most holds valid at once (a hold of several
	// locks counts once, valid while all of them are).
	MostHolders int `json:"most_holders"`
	// FenceRegressions counts grants whose fence was not above that of
	// every grant of the same key completed before they began.
	FenceRegressions int `json:"fence_regressions"`
	// LostWrites counts writes the register accepted from a holder after
	// another client had been granted a larger fence for the same key:
	// data the fence did not save, since the newer holder had not written
	// yet.
	LostWrites int `json:"lost_writes"`
	// SavedWrites counts writes the register refused (a smaller fence than
	// one it had accepted): data the fence saved.
	SavedWrites int `json:"saved_writes"`
	// LateWrites counts writes a client sent after its lease's Until, and
	// LateAccepted those of them the register accepted.
	LateWrites   int `json:"late_writes"`
	LateAccepted int `json:"late_accepted"`
	// Writes counts the writes clients sent; StoreAccepted those the
	// register accepted, LateRefused the late ones it refused; with a store
	// (Cell.Register), StoreErrors those its store failed (outcome
	// unknown) and StoreCancelled those the client gave up on (its lease
	// ended) before the store wrote them.
	Writes         int `json:"writes,omitempty"`
	StoreAccepted  int `json:"store_accepted,omitempty"`
	LateRefused    int `json:"late_refused,omitempty"`
	StoreErrors    int `json:"store_errors,omitempty"`
	StoreCancelled int `json:"store_cancelled,omitempty"`
	// Linearizable is porcupine's verdict on the register's history, one
	// register per key: "Ok", "Illegal" (some key's is not) or "Unknown"
	// (the check of some key timed out).
	Linearizable string `json:"linearizable"`
}

// Violations returns the count of events that break what every strategy
// promises outside its documented limits: two holders at once, a fence
// that goes back, an accepted write from a stale holder, and a write sent
// after the lease ended.
func (c Counts) Violations() int {
	n := c.Overlaps + c.FenceRegressions + c.LostWrites + c.LateWrites
	if c.Linearizable == string(porcupine.Illegal) {
		n++
	}
	return n
}

type grant struct {
	client, op  int
	key         string
	acquire, at int64 // Lock called, Lock returned
	end         int64 // the lease's end: its last Until, Unlock called, or the Context ended
	fence       uint64
	over        bool // released or ended: end is final
}

// A lockOf names one lock of a client's attempt: a hold made of several
// (the read-write lock's writer, the multi-key lock) has one per key.
type lockOf struct {
	client, op int
	key        string
}

// A writeOf names one write of a lock.
type writeOf struct {
	lockOf
	n int
}

// Check counts what the history shows.
func Check(events []Event) Counts {
	var c Counts
	l := c.replayLeases(events)
	c.countOverlaps(l.order)
	c.MostHolders = mostAtOnce(l.holds)
	ops := c.checkWrites(events, l)
	c.Linearizable = linearizable(ops)
	return c
}

// leases are the grants a history shows, with each lease's end as its
// renewals, releases and ended Contexts set it.
type leases struct {
	holds  map[[2]int][]*grant // an attempt's grants, one per key
	grants map[lockOf]*grant
	order  []*grant // as granted
}

// replayLeases replays the attempts, grants, renewals and ends of events,
// counting attempts, misses and grants in c.
func (c *Counts) replayLeases(events []Event) leases {
	acquires := map[[2]int]int64{}
	l := leases{holds: map[[2]int][]*grant{}, grants: map[lockOf]*grant{}}
	for _, e := range events {
		k := [2]int{e.Client, e.Op}
		switch e.Kind {
		case Acquire:
			c.Attempts++
			acquires[k] = e.T
		case Failed:
			c.Missed++
		case Granted:
			g := &grant{client: e.Client, op: e.Op, key: e.Key, acquire: acquires[k], at: e.T, end: e.Until, fence: e.Fence}
			if len(l.holds[k]) == 0 {
				c.Grants++
				if e.Info == grantedHandedOff {
					c.Handoffs++
				}
				c.LongestWaitMs = max(c.LongestWaitMs, (e.T-g.acquire)/int64(time.Millisecond))
			}
			if len(l.holds[k]) == 1 {
				c.SeveralKeys++
			}
			l.holds[k] = append(l.holds[k], g)
			l.grants[lockOf{e.Client, e.Op, e.Key}] = g
			l.order = append(l.order, g)
		case Renewed:
			if g := l.grants[lockOf{e.Client, e.Op, e.Key}]; g != nil && !g.over {
				g.end = max(g.end, e.Until)
			}
		case Ended:
			if g := l.grants[lockOf{e.Client, e.Op, e.Key}]; g != nil && !g.over {
				g.end, g.over = min(g.end, e.T), true
			}
		case Release:
			for _, g := range l.holds[k] {
				if !g.over {
					g.end, g.over = min(g.end, e.T), true
				}
			}
		}
	}
	return l
}

// countOverlaps counts the grants (in order) that overlap another client's
// lease of their key, and those whose fence is not above that of an
// earlier grant of their key.
func (c *Counts) countOverlaps(order []*grant) {
	// Two leases of one key held by different clients overlap when one was
	// granted before the other ended.
	for i, g := range order {
		for _, h := range order[:i] {
			if h.key == g.key && h.client != g.client && g.at < h.end && h.at < g.end {
				c.Overlaps++
				break
			}
		}
		for _, h := range order[:i] {
			if h.key == g.key && h.at < g.acquire && h.fence >= g.fence {
				c.FenceRegressions++
				break
			}
		}
	}
}

// checkWrites checks the register's decisions against the grants and the
// clients' writes, counting in c, and returns the register's history by key.
func (c *Counts) checkWrites(events []Event, l leases) map[string][]porcupine.Operation {
	ops := map[string][]porcupine.Operation{} // by key
	calls := map[writeOf]int64{}
	for _, e := range events {
		w := writeOf{lockOf{e.Client, e.Op, e.Key}, e.N}
		g := l.grants[w.lockOf]
		switch e.Kind {
		case Write:
			c.Writes++
			calls[w] = e.T
			if g != nil && e.T > g.end {
				c.LateWrites++
			}
		case RegError:
			c.StoreErrors++
		case RegCancel:
			c.StoreCancelled++
		case RegRefuse:
			c.SavedWrites++
			if call, ok := calls[w]; ok && g != nil && call > g.end {
				c.LateRefused++
			}
		case RegAccept:
			c.StoreAccepted++
			if g == nil {
				continue
			}
			for _, h := range l.order {
				if h.key == g.key && h.fence > g.fence && h.at < e.T {
					c.LostWrites++
					break
				}
			}
			if call, ok := calls[w]; ok && call > g.end {
				c.LateAccepted++
			}
		case Accepted, Refused, Unknown:
			op := porcupine.Operation{ClientId: e.Client - 1, Input: e.Fence, Call: calls[w], Output: e.Kind, Return: e.T}
			if e.Kind == Unknown {
				op.Return = math.MaxInt64
			}
			ops[e.Key] = append(ops[e.Key], op)
		}
	}
	return ops
}

// linearizable is porcupine's verdict on ops, one register per key: Ok,
// Illegal if some key's is not, else Unknown if the check of some key
// timed out.
func linearizable(ops map[string][]porcupine.Operation) string {
	verdict := string(porcupine.Ok)
	for _, key := range slices.Sorted(maps.Keys(ops)) {
		o := ops[key]
		sort.Slice(o, func(i, j int) bool { return o[i].Call < o[j].Call })
		switch r := porcupine.CheckOperationsTimeout(registerModel.ToModel(), o, 10*time.Second); r {
		case porcupine.Illegal:
			verdict = string(r)
		case porcupine.Unknown:
			if verdict == string(porcupine.Ok) {
				verdict = string(r)
			}
		}
	}
	return verdict
}

// mostAtOnce returns the most holds valid at one moment: a hold of several
// locks is valid from its last grant to the first end of one of them.
func mostAtOnce(holds map[[2]int][]*grant) int {
	type edge struct {
		t     int64
		delta int
	}
	var edges []edge
	for _, gs := range holds {
		at, end := gs[0].at, gs[0].end
		for _, g := range gs[1:] {
			at, end = max(at, g.at), min(end, g.end)
		}
		if at < end {
			edges = append(edges, edge{at, 1}, edge{end, -1})
		}
	}
	// At equal times an end comes first: a lease ending as another begins
	// is not held with it.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.delta, b.delta)) })
	most, n := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// registerModel is the fenced register as a sequential object: its state is
// the largest fence accepted; a write with a smaller one is refused. A
// write whose outcome its client never heard may or may not have happened.
var registerModel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{uint64(0)} },
	Step: func(state, input, output interface{}) []interface{} {
		m, f := state.(uint64), input.(uint64)
		switch output.(Kind) {
		case Accepted:
			if f >= m {
				return []interface{}{f}
			}
		case Refused:
			if f < m {
				return []interface{}{m}
			}
		case Unknown:
			if f >= m {
				return []interface{}{m, f}
			}
			return []interface{}{m}
		}
		return nil
	},
}
