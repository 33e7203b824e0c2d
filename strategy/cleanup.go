package strategy

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Redlock's clean-up: calls whose replies come after the call that made
// them returned (late grants, lost replies, nodes that timed out), and the
// releases that undo them, tracked by key and token so that a new
// acquisition by the same token waits for them.

// releaseRest releases from's lock, in the background, on the nodes that
// did not hand it off (res: the hand-off's results), where it may still be
// held, until each has answered or until expires.
func (s *redlock) releaseRest(ctx context.Context, key, from string, res []nodeResult, expires time.Time) {
	var rest []int
	for i, r := range res {
		if r.Outcome != outcomeGranted {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return
	}
	f := s.flights.add(key, from, true, nil)
	go func() {
		defer s.flights.done(f)
		s.settle(context.WithoutCancel(ctx), key, from, rest, expires)
	}()
}

// undo releases a failed acquisition, or a lost extension: before returning
// on every node that granted it or failed at once (its reply may have been
// lost), and in the background on the nodes that timed out and on those
// whose reply to the single call of late is still to come, as each
// arrives. An acquisition by the same token waits for the background
// releases.
func (s *redlock) undo(ctx context.Context, key, token string, res []nodeResult, late *round, expires time.Time) {
	cctx := context.WithoutCancel(ctx)
	if late.left > 0 && len(late.calls) == 1 {
		s.drain(late, key, token, true, expires, 0)
	}
	var now, later []int
	for i, r := range res {
		switch {
		case r.Outcome == outcomeFailed && timedOut(r.Err):
			later = append(later, i)
		case r.Outcome == outcomeGranted || r.Outcome == outcomeFailed:
			now = append(now, i)
		}
	}
	if len(later) > 0 {
		f := s.flights.add(key, token, true, nil)
		go func() {
			defer s.flights.done(f)
			s.settle(cctx, key, token, later, expires)
		}()
	}
	if len(now) > 0 {
		s.release(cctx, key, token, now).collect(cctx, never)
	}
}

// settle releases key by token on nodes that timed out, until each has
// answered, or until expires, when no grant of the token can be left: a
// frozen node runs the queued acquisition when it thaws. A refusal (the
// token holds nothing there) is checked once more a little later, since
// the thawed node may run the acquisition, sent on another connection,
// after the release.
func (s *redlock) settle(ctx context.Context, key, token string, nodes []int, expires time.Time) {
	s.settleUntil(ctx, key, token, nodes, expires, false)
}

// settleUntil is settle; with persist, a node that refuses is asked again,
// with pauses growing to a second, until it releases a grant or until
// expires: an acquisition that timed out may still be waiting to run
// there, however late.
func (s *redlock) settleUntil(ctx context.Context, key, token string, nodes []int, expires time.Time, persist bool) {
	refused := make([]bool, len(s.nodes))
	for pause := 10 * time.Millisecond; ctx.Err() == nil; pause = min(2*pause, time.Second) {
		r := s.release(ctx, key, token, nodes)
		r.collect(ctx, never)
		again := nodes[:0:0]
		for _, i := range nodes {
			switch r.t[0].res[i].Outcome {
			case outcomeGranted:
			case outcomeRefused:
				if persist || !refused[i] {
					refused[i] = true
					again = append(again, i)
				}
			default:
				again = append(again, i)
			}
		}
		if nodes = again; len(nodes) == 0 || !time.Now().Add(pause).Before(expires) {
			return
		}
		time.Sleep(pause)
	}
}

// drain receives the replies still to come on late, a round of one call,
// in the background. When releasing is set (a failed acquisition, or a
// release), or once a Release of key by token begins, each late grant or
// lost reply of an acquisition or extension is released as it arrives. An
// acquisition of key by token waits until no such release is running.
// Otherwise, when fence is not 0 (a granted acquisition), a late grant
// whose lock got another fence is given fence, so that Extend returns the
// acquisition's fence whichever nodes answer it; and the nodes whose
// answer never came (uncertain: they timed out, or their reply was lost),
// which may run the acquisition later, are settled once a Release begins,
// until expires, so that a grant the acquisition leaves there late does not
// hold the node for the lock's TTL.
func (s *redlock) drain(late *round, key, token string, releasing bool, expires time.Time, fence int64, uncertain ...int) {
	var settling context.Context
	var cancel context.CancelFunc // a new acquisition by token ends the settling: late grants are then its own
	if fence != 0 {
		settling, cancel = context.WithDeadline(context.Background(), expires)
	}
	f := s.flights.add(key, token, releasing, cancel)
	go func() {
		defer s.flights.done(f)
		for range late.left {
			rp := <-late.ch
			c := rp.calls[0]
			code, v, ok := verdict(c.Reply)
			replied := c.Err == nil && ok && len(c.Reply) <= 2
			switch {
			case late.op == "release" || replied && code == replyRefused:
			case fence != 0 && !replied:
				if !slices.Contains(uncertain, rp.i) {
					uncertain = append(uncertain, rp.i)
				}
			case s.flights.releasing(f):
				s.settle(context.Background(), key, token, []int{rp.i}, expires)
			case fence != 0 && v != fence:
				r := s.fenceRound(context.Background(), lockKeys(key), token, fence, []int{rp.i})
				r.collect(context.Background(), never)
			}
		}
		if fence == 0 {
			return
		}
		defer cancel()
		if len(uncertain) == 0 {
			return
		}
		select {
		case <-f.released:
			s.settleUntil(settling, key, token, uncertain, expires, true)
		case <-settling.Done():
		}
	}()
}

// timedOutNodes lists the nodes of res that failed by a timeout: they may
// still run the call.
func timedOutNodes(res []nodeResult) []int {
	var out []int
	for i, r := range res {
		if r.Outcome == outcomeFailed && timedOut(r.Err) {
			out = append(out, i)
		}
	}
	return out
}

// flights tracks replies still to come after the call that asked for them
// returned, by key and token.
type flights struct {
	n  atomic.Int32 // len(m), read without the lock on the fast path
	mu sync.Mutex
	m  map[flightID]*flight // each key's flights, linked by next
}

// A flightID is a key and a token: a map key that, unlike the two joined
// in a string, allocates nothing.
type flightID struct{ key, token string }

type flight struct {
	id        flightID
	next      *flight            // the key's other flights; guarded by flights.mu
	releasing bool               // guarded by flights.mu
	released  chan struct{}      // closed when releasing is set
	cancel    context.CancelFunc // a granted acquisition's: ends its settling of uncertain nodes
	done      chan struct{}
}

// closedChan is the released channel of a flight that is releasing from
// the start.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (fs *flights) add(key, token string, releasing bool, cancel context.CancelFunc) *flight {
	f := &flight{id: flightID{key, token}, releasing: releasing, released: closedChan,
		cancel: cancel, done: make(chan struct{})}
	if !releasing {
		f.released = make(chan struct{})
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = map[flightID]*flight{}
	}
	if f.next = fs.m[f.id]; f.next == nil {
		fs.n.Add(1)
	}
	fs.m[f.id] = f
	return f
}

func (fs *flights) done(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	close(f.done)
	head := fs.m[f.id]
	if head == f {
		head = f.next
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == f {
				p.next = f.next
				break
			}
		}
	}
	if head == nil {
		delete(fs.m, f.id)
		fs.n.Add(-1)
	} else {
		fs.m[f.id] = head
	}
}

func (fs *flights) releasing(f *flight) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return f.releasing
}

// markReleasing has every flight of key by token release its late grants.
func (fs *flights) markReleasing(key, token string) {
	if fs.n.Load() == 0 {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for f := fs.m[flightID{key, token}]; f != nil; f = f.next {
		if !f.releasing {
			f.releasing = true
			close(f.released)
		}
	}
}

// waitReleases returns when no flight of key by token is releasing, or ctx
// ended. It first ends the settling of uncertain nodes of granted
// acquisitions: late grants of token are the new acquisition's.
func (fs *flights) waitReleases(ctx context.Context, key, token string) {
	if fs.n.Load() == 0 {
		return
	}
	var wait []chan struct{}
	fs.mu.Lock()
	for f := fs.m[flightID{key, token}]; f != nil; f = f.next {
		if f.cancel != nil {
			f.cancel()
		}
		if f.releasing {
			wait = append(wait, f.done)
		}
	}
	fs.mu.Unlock()
	for _, c := range wait {
		select {
		case <-c:
		case <-ctx.Done():
			return
		}
	}
}
