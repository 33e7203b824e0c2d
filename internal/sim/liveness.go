package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// A Contention is a liveness run: Clients Managers (processes, each with
// its own Nodes of the servers, default options over Redlock of Servers
// nodes) whose one worker each takes one key, holds it for Hold and unlocks
// it, again and again for For of virtual time, while the first Slow
// servers delay every request (each message on each client's link), or
// with Replies every reply and published message, as Delay draws.
type Contention struct {
	Clients int
	Servers int
	Slow    int
	// Delay draws one request's delay on a slow server's link.
	Delay   func(r *rand.Rand) time.Duration
	Replies bool
	Hold    time.Duration
	For     time.Duration
}

// Uniform draws delays uniformly in [0, max].
func Uniform(max time.Duration) func(*rand.Rand) time.Duration {
	return func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(max) + 1)) }
}

// Fixed delays every request by d.
func Fixed(d time.Duration) func(*rand.Rand) time.Duration {
	return func(*rand.Rand) time.Duration { return d }
}

// A Tally is what a liveness run saw.
type Tally struct {
	Grants   int // Lock calls that returned a lock within For
	Attempts int // acquisitions tried (Acquire calls)
	// Failed attempts, by what the nodes answered: Split, some granted but
	// fewer than a quorum (the others refused or had not answered); Refused,
	// none granted.
	Split, Refused int
	// Overlapping counts attempts that ran while another client's attempt
	// ran too.
	Overlapping int
	// Late counts grants returned past their validity (a safety check).
	Late int
	// Overlaps counts grants that began while another was valid.
	Overlaps int
}

func (t Tally) String() string {
	per := 0.0
	if t.Grants > 0 {
		per = float64(t.Attempts) / float64(t.Grants)
	}
	return fmt.Sprintf("%d grants, %d attempts (%.1f per grant): %d split, %d refused outright; %d overlapped another client's; late %d, overlaps %d",
		t.Grants, t.Attempts, per, t.Split, t.Refused, t.Overlapping, t.Late, t.Overlaps)
}

// RunContention runs c in a synctest bubble, with the delays drawn from
// seed.
func RunContention(t *testing.T, seed uint64, c Contention) Tally {
	var res Tally
	synctest.Test(t, func(t *testing.T) { res = contend(t, seed, c) })
	return res
}

// span is one acquisition attempt, or one grant's validity.
type span struct {
	client     int
	start, end time.Duration
}

// contention is one liveness run's shared state: what the clients'
// attempts and grants recorded, and when the run began.
type contention struct {
	c    Contention
	seed uint64
	t0   time.Time

	mu       sync.Mutex
	res      Tally
	attempts []span // every acquisition attempt
	valid    []span // every grant's validity
}

func contend(t *testing.T, seed uint64, c Contention) Tally {
	r := &contention{c: c, seed: seed, t0: time.Now()}
	servers := startServers(c.Servers)
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	mans := make([]*dlm.Manager, c.Clients)
	for i := range c.Clients {
		mans[i] = r.newManager(t, i, servers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.For)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range mans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx, i, m)
		}()
	}
	wg.Wait()
	time.Sleep(time.Minute) // the strategies' background work ends
	return r.tally()
}

// startServers starts n in-memory servers, named s0, s1, ...
func startServers(n int) []*dlmtest.Server {
	var servers []*dlmtest.Server
	for i := range n {
		servers = append(servers, dlmtest.NewServer(dlmtest.WithName(fmt.Sprintf("s%d", i))))
	}
	return servers
}

// now is the virtual time since the run began.
func (r *contention) now() time.Duration { return time.Since(r.t0) }

// newManager builds client i's Manager: its own Nodes of the servers (the
// first Slow of them delayed as the Contention says) under a Redlock that
// reports each attempt to r.
func (r *contention) newManager(t *testing.T, i int, servers []*dlmtest.Server) *dlm.Manager {
	var nodes []driver.Node
	for j, srv := range servers {
		nd := srv.Node()
		nd.SetDelay(linkDelay(r.seed, i, j))
		if j < r.c.Slow {
			nd.SetFaults(r.slowFaults(i, j))
		}
		nodes = append(nodes, nd)
	}
	rl, err := strategy.NewRedlock(nodes)
	if err != nil {
		t.Fatal(err)
	}
	counted := &counting{Handoff: rl.(driver.Handoff), now: r.now, note: func(s span, err error) { r.noteAttempt(i, s, err) }}
	m, err := dlm.New(counted)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// slowFaults delays, on client i's link to slow server j, every request
// (or with Replies every reply) by a draw of Delay.
func (r *contention) slowFaults(i, j int) func(reply bool) dlmtest.Fault {
	var rmu sync.Mutex
	rng := rand.New(rand.NewPCG(r.seed, uint64(5000+i*64+j)))
	return func(reply bool) dlmtest.Fault {
		if reply != r.c.Replies {
			return dlmtest.Fault{}
		}
		rmu.Lock()
		defer rmu.Unlock()
		return dlmtest.Fault{Delay: r.c.Delay(rng)}
	}
}

// noteAttempt records client i's acquisition attempt s, which ended in
// err, and counts how it failed if it did.
func (r *contention) noteAttempt(i int, s span, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.client = i
	r.attempts = append(r.attempts, s)
	// A Redlock acquisition that failed says how many nodes granted it.
	var qe interface{ GrantedNodes() int }
	failed := errors.As(err, &qe)
	if debugGrants && s.start < 3*time.Second {
		o := "granted"
		if err != nil {
			o = err.Error()
		}
		println("attempt", i, s.start.String(), s.end.String(), o)
	}
	r.res.Attempts++
	switch {
	case err == nil:
	case failed && qe.GrantedNodes() > 0:
		r.res.Split++
	default:
		r.res.Refused++
	}
}

// work is client i's worker: until ctx ends, take the key, hold it for
// Hold and unlock it.
func (r *contention) work(ctx context.Context, i int, m *dlm.Manager) {
	for ctx.Err() == nil {
		l, err := m.Lock(ctx, "contended")
		if err != nil {
			continue
		}
		if debugGrants && r.now() < 3*time.Second {
			println("grant", i, r.now().String(), l.Fence())
		}
		k := r.noteGrant(i, l)
		time.Sleep(r.c.Hold)
		uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
		// The lease ends when Unlock begins: the release may
		// still be on its way when the next grant comes.
		r.mu.Lock()
		r.valid[k].end = min(r.valid[k].end, r.now())
		r.mu.Unlock()
		_ = l.Unlock(uctx)
		ucancel()
	}
}

// noteGrant records client i's grant of l, counting it late if it came
// past its validity, and returns its index in valid.
func (r *contention) noteGrant(i int, l *dlm.Lock) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Grants++
	if !time.Now().Before(l.Until()) {
		r.res.Late++
	}
	k := len(r.valid)
	r.valid = append(r.valid, span{client: i, start: r.now(), end: l.Until().Sub(r.t0)})
	return k
}

// tally counts, over what the run recorded, the attempts that overlapped
// another client's and the grants that began while another was valid.
func (r *contention) tally() Tally {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.res
	for i, a := range r.attempts {
		for j, b := range r.attempts {
			if j != i && b.client != a.client && b.start < a.end && a.start < b.end {
				res.Overlapping++
				break
			}
		}
	}
	slices.SortFunc(r.valid, func(a, b span) int { return int(a.start - b.start) })
	var end time.Duration
	for i, v := range r.valid {
		if i > 0 && v.start < end {
			res.Overlaps++
		}
		end = max(end, v.end)
	}
	return res
}

// counting is a Redlock that reports each acquisition attempt.
type counting struct {
	driver.Handoff
	note func(span, error)
	now  func() time.Duration
}

func (c *counting) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	start := c.now()
	l, err := c.Handoff.Acquire(ctx, key, token, ttl)
	c.note(span{start: start, end: c.now()}, err)
	return l, err
}
