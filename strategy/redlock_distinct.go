package strategy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
func (s *Redlock) checkDistinct(ctx context.Context) error {
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
		s.probe(ctx)
	case due:
		go s.probe(context.WithoutCancel(ctx))
	}
	if p := d.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// probe asks the nodes whose server is not known yet for its run_id.
func (s *Redlock) probe(ctx context.Context) {
	d := &s.distinct
	d.mu.Lock()
	if d.known == nil {
		d.known, d.ids = make([]bool, len(s.nodes)), map[[4]int64]int{}
	}
	var ask []int
	for i, k := range d.known {
		if !k {
			ask = append(ask, i)
		}
	}
	d.mu.Unlock()
	ids := make([][4]int64, len(s.nodes))
	told := make([]bool, len(s.nodes))
	r := s.round(ctx, "probe", serverIDScript, []dlm.Call{{Keys: []string{probeKey}}}, ask, s.nodeTimeout(0),
		func(_ *tally, i int, r []int64) (Outcome, error) {
			switch len(r) {
			case 0: // the server cannot tell
			case 4:
				ids[i], told[i] = [4]int64(r), true
			default:
				return Failed, errReply(r)
			}
			return Granted, nil
		})
	r.collect(ctx, never)
	d.mu.Lock()
	defer d.mu.Unlock()
	left := 0
	for _, i := range ask {
		switch res := r.t[0].res[i]; {
		case res.Outcome == Failed && dlm.Permanent(res.Err):
			d.known[i] = true // it never will (no EVALSHA for this user): do not ask again
			continue
		case res.Outcome != Granted:
			left++
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
	if left == 0 {
		d.settled.Store(true)
	}
}
