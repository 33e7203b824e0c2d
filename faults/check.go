package faults

import (
	"math"
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
	// LongestWaitMs is the longest a granted Lock call waited.
	LongestWaitMs int64 `json:"longest_wait_ms"`

	// Overlaps counts grants made while another client's lease was still
	// valid (before its Until, its Unlock, or its Context's end).
	Overlaps int `json:"overlaps"`
	// FenceRegressions counts grants whose fence was not above that of
	// every grant completed before they began.
	FenceRegressions int `json:"fence_regressions"`
	// LostWrites counts writes the register accepted from a holder after
	// another client had been granted a larger fence: data the fence did
	// not save, since the newer holder had not written yet.
	LostWrites int `json:"lost_writes"`
	// SavedWrites counts writes the register refused (a smaller fence than
	// one it had accepted): data the fence saved.
	SavedWrites int `json:"saved_writes"`
	// LateWrites counts writes a client sent after its lease's Until, and
	// LateAccepted those of them the register accepted.
	LateWrites   int `json:"late_writes"`
	LateAccepted int `json:"late_accepted"`
	// Linearizable is porcupine's verdict on the register's history:
	// "Ok", "Illegal" or "Unknown" (the check timed out).
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
	acquire, at int64 // Lock called, Lock returned
	end         int64 // the lease's end: its last Until, Unlock called, or the Context ended
	fence       uint64
	over        bool // released or ended: end is final
}

// Check counts what the history shows.
func Check(events []Event) Counts {
	var c Counts
	acquires := map[[2]int]int64{}
	grants := map[[2]int]*grant{}
	var order []*grant
	for _, e := range events {
		k := [2]int{e.Client, e.Op}
		switch e.Kind {
		case Acquire:
			c.Attempts++
			acquires[k] = e.T
		case Failed:
			c.Missed++
		case Granted:
			c.Grants++
			if e.Info == grantedHandedOff {
				c.Handoffs++
			}
			g := &grant{client: e.Client, op: e.Op, acquire: acquires[k], at: e.T, end: e.Until, fence: e.Fence}
			grants[k] = g
			order = append(order, g)
			c.LongestWaitMs = max(c.LongestWaitMs, (e.T-g.acquire)/int64(time.Millisecond))
		case Renewed:
			if g := grants[k]; g != nil && !g.over {
				g.end = max(g.end, e.Until)
			}
		case Release, Ended:
			if g := grants[k]; g != nil && !g.over {
				g.end, g.over = min(g.end, e.T), true
			}
		}
	}
	// Two leases of different clients overlap when one was granted before
	// the other ended.
	for i, g := range order {
		for _, h := range order[:i] {
			if h.client != g.client && g.at < h.end && h.at < g.end {
				c.Overlaps++
				break
			}
		}
		for _, h := range order[:i] {
			if h.at < g.acquire && h.fence >= g.fence {
				c.FenceRegressions++
				break
			}
		}
	}
	// The register's decisions against the grants and the clients' writes.
	var ops []porcupine.Operation
	calls := map[[3]int]int64{}
	for _, e := range events {
		w := [3]int{e.Client, e.Op, e.N}
		g := grants[[2]int{e.Client, e.Op}]
		switch e.Kind {
		case Write:
			calls[w] = e.T
			if g != nil && e.T > g.end {
				c.LateWrites++
			}
		case RegRefuse:
			c.SavedWrites++
		case RegAccept:
			if g == nil {
				continue
			}
			for _, h := range order {
				if h.fence > g.fence && h.at < e.T {
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
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	c.Linearizable = string(porcupine.CheckOperationsTimeout(registerModel.ToModel(), ops, 10*time.Second))
	return c
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
