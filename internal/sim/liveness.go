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

func contend(t *testing.T, seed uint64, c Contention) Tally {
	t0 := time.Now()
	now := func() time.Duration { return time.Since(t0) }
	var servers []*dlmtest.Server
	for i := range c.Servers {
		servers = append(servers, dlmtest.NewServer(dlmtest.WithName(fmt.Sprintf("s%d", i))))
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	var mu sync.Mutex
	var res Tally
	var attempts, valid []span
	mans := make([]*dlm.Manager, c.Clients)
	for i := range c.Clients {
		var nodes []dlm.Node
		for j, srv := range servers {
			nd := srv.Node()
			nd.SetDelay(linkDelay(seed, i, j))
			if j < c.Slow {
				var rmu sync.Mutex
				r := rand.New(rand.NewPCG(seed, uint64(5000+i*64+j)))
				nd.SetFaults(func(reply bool) dlmtest.Fault {
					if reply != c.Replies {
						return dlmtest.Fault{}
					}
					rmu.Lock()
					defer rmu.Unlock()
					return dlmtest.Fault{Delay: c.Delay(r)}
				})
			}
			nodes = append(nodes, nd)
		}
		rl, err := strategy.NewRedlock(nodes)
		if err != nil {
			t.Fatal(err)
		}
		counted := &counting{Redlock: rl, now: now, note: func(s span, err error) {
			mu.Lock()
			defer mu.Unlock()
			s.client = i
			attempts = append(attempts, s)
			var qe *strategy.QuorumError
			failed := errors.As(err, &qe)
			if debugGrants && s.start < 3*time.Second {
				o := "granted"
				if failed {
					o = ""
					for _, n := range qe.Nodes {
						o += n.Outcome.String()[:1] // g, r, f or p
					}
					o += " " + qe.Reason
				}
				println("attempt", i, s.start.String(), s.end.String(), o)
			}
			res.Attempts++
			switch {
			case err == nil:
			case failed && qe.Count(strategy.Granted) > 0:
				res.Split++
			default:
				res.Refused++
			}
		}}
		m, err := dlm.New(counted)
		if err != nil {
			t.Fatal(err)
		}
		mans[i] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.For)
	defer cancel()
	var wg sync.WaitGroup
	for i, m := range mans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := m.Lock(ctx, "contended")
				if err != nil {
					continue
				}
				if debugGrants && now() < 3*time.Second {
					println("grant", i, now().String(), l.Fence())
				}
				mu.Lock()
				res.Grants++
				if !time.Now().Before(l.Until()) {
					res.Late++
				}
				k := len(valid)
				valid = append(valid, span{client: i, start: now(), end: l.Until().Sub(t0)})
				mu.Unlock()
				time.Sleep(c.Hold)
				uctx, ucancel := context.WithTimeout(context.Background(), time.Second)
				// The lease ends when Unlock begins: the release may
				// still be on its way when the next grant comes.
				mu.Lock()
				valid[k].end = min(valid[k].end, now())
				mu.Unlock()
				_ = l.Unlock(uctx)
				ucancel()
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Minute) // the strategies' background work ends
	mu.Lock()
	defer mu.Unlock()
	for i, a := range attempts {
		for j, b := range attempts {
			if j != i && b.client != a.client && b.start < a.end && a.start < b.end {
				res.Overlapping++
				break
			}
		}
	}
	slices.SortFunc(valid, func(a, b span) int { return int(a.start - b.start) })
	var end time.Duration
	for i, v := range valid {
		if i > 0 && v.start < end {
			res.Overlaps++
		}
		end = max(end, v.end)
	}
	return res
}

// counting is a Redlock that reports each acquisition attempt.
type counting struct {
	*strategy.Redlock
	note func(span, error)
	now  func() time.Duration
}

func (c *counting) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	start := c.now()
	l, err := c.Redlock.Acquire(ctx, key, token, ttl)
	c.note(span{start: start, end: c.now()}, err)
	return l, err
}
