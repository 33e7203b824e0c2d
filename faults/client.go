package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/election"
	"github.com/dlmgo/dlm/fairlock"
	"github.com/dlmgo/dlm/multilock"
	"github.com/dlmgo/dlm/rwlock"
	"github.com/dlmgo/dlm/semaphore"
)

// clientEnv names the environment variable that makes this program a
// client process: it holds the clientConfig as JSON.
const clientEnv = "DLM_FAULTS_CLIENT"

// A clientConfig is what a client process does: until Stop, Lock Key
// (each attempt bounded by Wait), write to the register with the fence,
// hold for Hold, write again if the lease still holds, Unlock. After a
// SIGUSR1, the next lock is held for three TTLs instead, renewed in the
// background, with a write every fifth of a TTL while the lease holds: the
// holder the holder nemeses ask for.
type clientConfig struct {
	ID       int
	URL      string
	Key      string
	TTL      time.Duration
	Wait     time.Duration
	Hold     time.Duration
	Register string
	Stop     int64  // on the monotonic clock; SIGTERM stops the client sooner
	Plant    string // a bug planted on purpose: "" or "stale-lease"
	Workers  int    // goroutines locking Key through the process's Manager, each client ID (ID-1)*Workers+1 onwards
	// Primitive is what the clients take: "" the plain lock
	// (Manager.Lock and Unlock), "fairlock" (fairlock.Lock and Unlock),
	// "election" (Campaign and Resign, the term as the fence),
	// "semaphore" (a permit of a semaphore of semaphorePermits: Acquire
	// and Unlock), "rwlock" (a read-write lock of semaphorePermits
	// readers: every third hold a writer's) or "multilock" (two of three
	// keys, by client).
	Primitive string
	// LateWrite: a long hold whose lease ended writes again, unchecked,
	// TTL/2 and 3 TTLs later (Cell.LateWrites).
	LateWrite bool
}

// MainIfClient runs a client process and exits when this process was
// started as one; otherwise it returns at once. A program that runs the
// suite (the dlmfaults command, the package's tests) calls it first.
func MainIfClient() {
	spec := os.Getenv(clientEnv)
	if spec == "" {
		return
	}
	var c clientConfig
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, "faults client:", err)
		os.Exit(2)
	}
	if err := runClient(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "faults client:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runClient(c clientConfig, out *os.File) error {
	w := bufio.NewWriter(out)
	var mu sync.Mutex
	emit := func(e Event) {
		if e.T == 0 {
			e.T = now()
		}
		b, _ := json.Marshal(e)
		mu.Lock()
		_, _ = w.Write(append(b, '\n'))
		_ = w.Flush() // a client may be killed at any moment
		mu.Unlock()
	}
	redis.SetLogger(quiet{}) // errors reach the events; go-redis' own log would drown the runner's
	ctx := context.Background()
	m, handed, closer, err := open(ctx, c)
	if err != nil {
		return err
	}
	defer closer.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: false, MaxIdleConnsPerHost: max(c.Workers, 1)}}
	var longNext, stop atomic.Bool
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			longNext.Store(true)
		}
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		stop.Store(true) // the runner ends the cell: finish this operation
	}()
	take, err := primitive(m, c)
	if err != nil {
		return err
	}
	var workers sync.WaitGroup
	for i := range max(c.Workers, 1) {
		id := (c.ID-1)*max(c.Workers, 1) + i + 1
		workers.Go(func() {
			work(ctx, c, id, take, handed, hc, &longNext, &stop, func(e Event) {
				e.Client = id
				emit(e)
			})
		})
	}
	workers.Wait()
	return nil
}

// A hold is what a client holds: the locks it is made of (one for every
// primitive but the read-write lock's writer and the multi-key lock), the
// context that ends when any of them can no longer be trusted, and how to
// give it up.
type hold struct {
	locks  []*dlm.Lock
	ctx    context.Context
	unlock func(context.Context) error
}

// A taker takes the primitive a client exercises, for the client's op-th
// attempt.
type taker func(ctx context.Context, client, op int) (hold, error)

// primitive returns the taker of c.Primitive on c.Key, through m. The
// primitives made of several keys name them with Key as the hash tag,
// which puts them in Key's slot, which the Cluster's slot migration moves.
func primitive(m *dlm.Manager, c clientConfig) (taker, error) {
	tag := "{" + c.Key + "}"
	switch c.Primitive {
	case "":
		return unlocked(func(ctx context.Context) (*dlm.Lock, error) { return m.Lock(ctx, c.Key) }), nil
	case "fairlock":
		f, err := fairlock.New(m, c.Key)
		if err != nil {
			return nil, err
		}
		return unlocked(f.Lock), nil
	case "semaphore":
		s, err := semaphore.New(m, tag, semaphorePermits)
		if err != nil {
			return nil, err
		}
		return unlocked(s.Acquire), nil
	case "rwlock":
		rw, err := rwlock.New(m, tag, semaphorePermits)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, _, op int) (hold, error) {
			lock := rw.RLock
			if op%3 == 0 {
				lock = rw.Lock
			}
			h, err := lock(ctx)
			if err != nil {
				return hold{}, err
			}
			return hold{h.Locks(), h.Context(), h.Unlock}, nil
		}, nil
	case "multilock":
		return func(ctx context.Context, client, _ int) (hold, error) {
			// Each client takes two of three keys: any two such sets share
			// a key, so at most one client holds at a time.
			set, err := multilock.Lock(ctx, m, tag+strconv.Itoa(client%3), tag+strconv.Itoa((client+1)%3))
			if err != nil {
				return hold{}, err
			}
			return hold{set.Locks(), set.Context(), set.Unlock}, nil
		}, nil
	case "election":
		e, err := election.New(m, c.Key)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, client, _ int) (hold, error) {
			ld, err := e.Campaign(ctx, "client "+strconv.Itoa(client))
			if err != nil {
				return hold{}, err
			}
			return hold{[]*dlm.Lock{ld.Lock()}, ld.Lock().Context(), ld.Resign}, nil
		}, nil
	}
	return nil, fmt.Errorf("unknown primitive %q", c.Primitive)
}

// semaphorePermits is the size of the "semaphore" primitive, and the most
// readers of the "rwlock": fewer than the clients, so that they contend,
// and more than one, so that a history shows whether that many hold at
// once, and no more.
const semaphorePermits = 2

// unlocked is the taker of locks that lock takes and Unlock gives up.
func unlocked(lock func(context.Context) (*dlm.Lock, error)) taker {
	return func(ctx context.Context, _, _ int) (hold, error) {
		l, err := lock(ctx)
		if err != nil {
			return hold{}, err
		}
		return hold{[]*dlm.Lock{l}, l.Context(), l.Unlock}, nil
	}
}

// work is one client (id) of the events: until Stop, it takes c.Key's
// primitive, writes with each of the hold's locks, holds and gives it up,
// as clientConfig says. handed tells whether a lease came by a hand-off.
func work(ctx context.Context, c clientConfig, id int, take taker, handed func(fence uint64) bool, hc *http.Client, longNext, stop *atomic.Bool, emit func(Event)) {
	w := &worker{ctx: ctx, c: c, id: id, hc: hc, emit: emit}
	for op := 1; now() < c.Stop && !stop.Load(); op++ {
		emit(Event{Kind: Acquire, Op: op})
		lctx, cancel := context.WithTimeout(ctx, c.Wait)
		h, err := take(lctx, id, op)
		cancel()
		if err != nil {
			emit(Event{Kind: Failed, Op: op, Info: err.Error()})
			continue
		}
		long, wasHanded := longNext.Swap(false), handed(h.locks[0].Fence())
		watching := w.granted(h, op, long, wasHanded)
		w.write(h, op, 1, false)
		if long {
			w.holdLong(h, op)
		} else {
			time.Sleep(c.Hold)
			w.write(h, op, 2, false)
		}
		w.release(h, op)
		watching.Wait()
	}
}

// A worker is what one client's work needs to write and to report.
type worker struct {
	ctx  context.Context
	c    clientConfig
	id   int
	hc   *http.Client
	emit func(Event)
}

// granted reports a grant of each of h's locks (a long hold's, or one
// handed off) and watches each until its lease ends; the WaitGroup waits
// for the watchers.
func (w *worker) granted(h hold, op int, long, wasHanded bool) *sync.WaitGroup {
	var watching sync.WaitGroup
	for _, l := range h.locks {
		g := Event{Kind: Granted, Op: op, Fence: l.Fence(), Key: l.Key(), Until: now() + int64(time.Until(l.Until()))}
		switch {
		case long:
			g.Info = grantedLong
		case wasHanded:
			g.Info = grantedHandedOff
		}
		w.emit(g)
		watching.Go(func() { w.watch(l, op) })
	}
	return &watching
}

// watch reports every renewal of l (within 2ms) and its lease's end.
func (w *worker) watch(l *dlm.Lock, op int) {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	last := l.Until()
	for {
		select {
		case <-l.Context().Done():
			w.emit(Event{Kind: Ended, Op: op, Key: l.Key(), Info: context.Cause(l.Context()).Error()})
			return
		case <-t.C:
			if u := l.Until(); !u.Equal(last) {
				last = u
				w.emit(Event{Kind: Renewed, Op: op, Key: l.Key(), Until: now() + int64(time.Until(u))})
			}
		}
	}
}

// holdLong holds h for three TTLs (while its lease holds), writing every
// fifth of a TTL, and with LateWrite writes after a lease that ended.
func (w *worker) holdLong(h hold, op int) {
	c := w.c
	n := 2
	for end := time.Now().Add(3 * c.TTL); time.Now().Before(end) && h.ctx.Err() == nil; n++ {
		time.Sleep(c.TTL / 5)
		w.write(h, op, n, false)
	}
	if c.LateWrite && h.ctx.Err() != nil {
		// The lease ended under a pause, a partition or a
		// failover: write with the old fence, as a holder that
		// checked its lease and then stalled, half a TTL after
		// the lease's end and again at three TTLs (after a
		// failover's promotion).
		time.Sleep(c.TTL / 2)
		w.write(h, op, n, true)
		time.Sleep(3*c.TTL - c.TTL/2)
		w.write(h, op, n+1, true)
	}
}

// release gives h up, reporting the Release before and Released after.
func (w *worker) release(h hold, op int) {
	w.emit(Event{Kind: Release, Op: op})
	uctx, cancel := context.WithTimeout(w.ctx, w.c.Wait)
	err := h.unlock(uctx)
	cancel()
	info := ""
	if err != nil {
		info = err.Error()
	}
	w.emit(Event{Kind: Released, Op: op, Info: info})
}

// write writes with each lock of h while its lease holds; unchecked,
// also after (Cell.LateWrites), the request then bound to c.Wait only.
func (w *worker) write(h hold, op, n int, unchecked bool) {
	for _, l := range h.locks {
		rctx := h.ctx
		if unchecked {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(w.ctx, w.c.Wait)
			defer cancel()
		} else if h.ctx.Err() != nil {
			return // the lease is over: the client must not write
		}
		key := l.Key()
		w.emit(Event{Kind: Write, Op: op, N: n, Fence: l.Fence(), Key: key})
		u := "http://" + w.c.Register + "/write?c=" + strconv.Itoa(w.id) + "&op=" + strconv.Itoa(op) + "&n=" + strconv.Itoa(n) +
			"&f=" + strconv.FormatUint(l.Fence(), 10) + "&k=" + url.QueryEscape(key)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, u, nil)
		resp, err := w.hc.Do(req)
		switch {
		case err != nil:
			w.emit(Event{Kind: Unknown, Op: op, N: n, Fence: l.Fence(), Key: key, Info: err.Error()})
		case resp.StatusCode == http.StatusOK:
			w.emit(Event{Kind: Accepted, Op: op, N: n, Fence: l.Fence(), Key: key})
		case resp.StatusCode == http.StatusConflict:
			w.emit(Event{Kind: Refused, Op: op, N: n, Fence: l.Fence(), Key: key})
		default:
			w.emit(Event{Kind: Unknown, Op: op, N: n, Fence: l.Fence(), Key: key, Info: resp.Status})
		}
		if resp != nil {
			_ = resp.Body.Close()
		}
	}
}

// renew renews a lease every third of its TTL, for as long as a long hold
// lasts.
var renew = dlm.WithAutoRenew(1.0/3, time.Minute)

// open opens c.URL, with c.Plant's bug planted in the strategy. handed
// reports whether the lease of a fence came from a hand-off by one of the
// Manager's Unlocks.
func open(ctx context.Context, c clientConfig) (m *dlm.Manager, handed func(fence uint64) bool, closer io.Closer, err error) {
	if c.Plant != "" && c.Plant != "stale-lease" && c.Plant != unfencedStore {
		return nil, nil, nil, fmt.Errorf("unknown bug to plant %q", c.Plant)
	}
	cfg, err := config.ParseURL(c.URL)
	if err != nil {
		return nil, nil, nil, err
	}
	var nodes []driver.Node
	keep := func(ctx context.Context, ep config.Endpoint) (driver.Node, io.Closer, error) {
		n, cl, err := goredis.Dial(ctx, ep)
		nodes = append(nodes, n)
		return n, cl, err
	}
	_, closer, err = cfg.Open(ctx, keep)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := cfg.NewStrategy(nodes...)
	if err != nil {
		_ = closer.Close()
		return nil, nil, nil, err
	}
	rec := &handoffs{Strategy: s}
	handed = func(uint64) bool { return false }
	if h, ok := s.(driver.Handoff); ok && c.Primitive == "" {
		rec.h = h
		s, handed = rec, rec.took
	}
	if c.Plant == "stale-lease" {
		s = staleLease{s, 3 * c.TTL}
	}
	m, err = dlm.New(s, append(cfg.ManagerOptions(), dlm.WithTTL(c.TTL), renew)...)
	if err != nil {
		_ = closer.Close()
		return nil, nil, nil, err
	}
	return m, handed, closer, nil
}

// handoffs passes a strategy's hand-offs through, keeping the fence of each
// lease handed over, so that a client can tell how its Lock was served.
type handoffs struct {
	driver.Strategy
	h      driver.Handoff
	fences sync.Map // fence → struct{}
}

func (s *handoffs) Handoff(ctx context.Context, key, from, to string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.h.Handoff(ctx, key, from, to, ttl)
	if err == nil {
		s.fences.Store(l.Fence, struct{}{})
	}
	return l, err
}

// took reports whether the lease of fence was handed over (once for each
// hand-off).
func (s *handoffs) took(fence uint64) bool {
	_, ok := s.fences.LoadAndDelete(fence)
	return ok
}

// staleLease is a strategy with a bug planted: it skips the validity
// check, handing out leases that end later than the servers' keys.
type staleLease struct {
	driver.Strategy
	extra time.Duration
}

func (s staleLease) Acquire(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.Strategy.Acquire(ctx, key, token, ttl)
	l.Until = l.Until.Add(s.extra)
	return l, err
}

func (s staleLease) Extend(ctx context.Context, key, token string, ttl time.Duration) (driver.Lease, error) {
	l, err := s.Strategy.Extend(ctx, key, token, ttl)
	l.Until = l.Until.Add(s.extra)
	return l, err
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}
