package strategy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
)

var serverIDScript = mustScript("server_id.lua")

// probeKey routes the server-identity script: on a Cluster it runs on the
// master of this key's slot, so two clients of one Cluster answer alike.
const probeKey = "dlm:{probe}"

// reprobeEvery bounds how often nodes whose server is not known yet (they
// did not answer) are asked again.
const reprobeEvery = time.Second

// distinct finds nodes that reach one server under two names (two clients
// of one server, of one Cluster, of one Sentinel-managed primary): a quorum
// counted over them is no quorum. Each node's server is known by its
// run_id, asked once it answers.
type distinct struct {
	mu      sync.Mutex
	ids     map[[4]int64]int // run_id → the node that reaches it
	known   []bool
	last    time.Time             // last probe
	refused atomic.Pointer[error] // set once two nodes reach one server
	settled atomic.Bool           // every node's server is known
}

// checkDistinct returns an error matching dlm.ErrInvalid when two of the
// nodes reach one server. The first call asks every node which server it
// reaches, within the per-node timeout; nodes that did not answer are
// asked again, in the background, at most once a second, until each has.
func (s *redlock) checkDistinct(ctx context.Context) error {
	d := &s.distinct
	if p := d.refused.Load(); p != nil {
		return *p
	}
	if d.settled.Load() {
		return nil
	}
	d.mu.Lock()
	first := d.known == nil
	due := first || time.Since(d.last) >= reprobeEvery
	if due {
		d.last = time.Now()
	}
	d.mu.Unlock()
	switch {
	case first:
		s.probe(ctx, nil)
	case due:
		go s.probe(context.WithoutCancel(ctx), nil)
	}
	if p := d.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// grantedDistinct returns how many of the nodes that granted in res are
// known to reach servers of their own. Until every node's server is known,
// a grant counts only once its node's server is: the nodes that granted
// and are not known yet (the probe at first use timed out on them, say on
// a loaded machine) are asked now, within the per-node timeout, so that
// one server reached under two names never makes a quorum. The error
// matches dlm.ErrInvalid when two nodes reach one server.
func (s *redlock) grantedDistinct(ctx context.Context, res []nodeResult) (int, error) {
	d := &s.distinct
	if !d.settled.Load() {
		var ask []int
		d.mu.Lock()
		for i, r := range res {
			if r.Outcome == outcomeGranted && (d.known == nil || !d.known[i]) {
				ask = append(ask, i)
			}
		}
		d.mu.Unlock()
		if len(ask) > 0 {
			s.probe(ctx, ask)
		}
	}
	if p := d.refused.Load(); p != nil {
		return 0, *p
	}
	n := 0
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, r := range res {
		if r.Outcome == outcomeGranted && d.known != nil && d.known[i] {
			n++
		}
	}
	return n, nil
}

// probe asks the nodes whose server is not known yet for its run_id: of
// only, when not nil, those.
func (s *redlock) probe(ctx context.Context, only []int) {
	d := &s.distinct
	d.mu.Lock()
	if d.known == nil {
		d.known, d.ids = make([]bool, len(s.nodes)), map[[4]int64]int{}
	}
	var ask []int
	for i, k := range d.known {
		if !k && (only == nil || slices.Contains(only, i)) {
			ask = append(ask, i)
		}
	}
	d.mu.Unlock()
	ids := make([][4]int64, len(s.nodes))
	told := make([]bool, len(s.nodes))
	r := s.round(ctx, "probe", serverIDScript, []driver.Call{{Keys: []string{probeKey}}}, ask, s.nodeTimeout(0),
		func(_ *tally, i int, r []int64) (outcome, error) {
			switch len(r) {
			case 0: // the server cannot tell
			case 4:
				ids[i], told[i] = [4]int64(r), true
			default:
				return outcomeFailed, errReply(r)
			}
			return outcomeGranted, nil
		})
	r.collect(ctx, never)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, i := range ask {
		if d.known[i] {
			continue // a probe running beside this one told
		}
		switch res := r.t[0].res[i]; {
		case res.Outcome == outcomeFailed && dlm.Permanent(res.Err):
			d.known[i] = true // it never will (no EVALSHA for this user): do not ask again
			continue
		case res.Outcome != outcomeGranted:
			continue
		}
		d.known[i] = true
		if !told[i] {
			continue
		}
		if j, ok := d.ids[ids[i]]; ok && j != i {
			err := fmt.Errorf("%w: redlock: nodes[%d] (%s) and nodes[%d] (%s) reach the same Redis server (run_id %010x…): Redlock needs independent masters",
				dlm.ErrInvalid, min(i, j), s.names[min(i, j)], max(i, j), s.names[max(i, j)], ids[i][0])
			d.refused.CompareAndSwap(nil, &err)
		}
		d.ids[ids[i]] = i
	}
	if !slices.Contains(d.known, false) {
		d.settled.Store(true)
	}
}
