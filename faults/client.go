package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
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
	ID        int
	URL       string
	Key       string
	TTL       time.Duration
	Wait      time.Duration
	Hold      time.Duration
	Register  string
	Stop      int64  // on the monotonic clock; SIGTERM stops the client sooner
	Plant     string // a bug planted on purpose: "" or "stale-lease"
	LongEvery int
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
		e.Client = c.ID
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
	m, closer, err := open(ctx, c)
	if err != nil {
		return err
	}
	defer closer.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: false, MaxIdleConnsPerHost: 1}}
	write := func(l *dlm.Lock, op, n int) {
		if l.Context().Err() != nil {
			return // the lease is over: the client must not write
		}
		emit(Event{Kind: Write, Op: op, N: n, Fence: l.Fence()})
		url := "http://" + c.Register + "/write?c=" + strconv.Itoa(c.ID) + "&op=" + strconv.Itoa(op) + "&n=" + strconv.Itoa(n) +
			"&f=" + strconv.FormatUint(l.Fence(), 10)
		req, _ := http.NewRequestWithContext(l.Context(), http.MethodPost, url, nil)
		resp, err := hc.Do(req)
		switch {
		case err != nil:
			emit(Event{Kind: Unknown, Op: op, N: n, Fence: l.Fence(), Info: err.Error()})
		case resp.StatusCode == http.StatusOK:
			emit(Event{Kind: Accepted, Op: op, N: n, Fence: l.Fence()})
		case resp.StatusCode == http.StatusConflict:
			emit(Event{Kind: Refused, Op: op, N: n, Fence: l.Fence()})
		default:
			emit(Event{Kind: Unknown, Op: op, N: n, Fence: l.Fence(), Info: resp.Status})
		}
		if resp != nil {
			_ = resp.Body.Close()
		}
	}
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
	for op := 1; now() < c.Stop && !stop.Load(); op++ {
		emit(Event{Kind: Acquire, Op: op})
		lctx, cancel := context.WithTimeout(ctx, c.Wait)
		l, err := m.Lock(lctx, c.Key)
		cancel()
		if err != nil {
			emit(Event{Kind: Failed, Op: op, Info: err.Error()})
			continue
		}
		long := longNext.Swap(false)
		g := Event{Kind: Granted, Op: op, Fence: l.Fence(), Until: now() + int64(time.Until(l.Until()))}
		if long {
			g.Info = "long"
		}
		emit(g)
		done := make(chan struct{})
		go func() {
			// Report every renewal (within 2ms) and the lease's end.
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			last := l.Until()
			for {
				select {
				case <-l.Context().Done():
					emit(Event{Kind: Ended, Op: op, Info: context.Cause(l.Context()).Error()})
					close(done)
					return
				case <-t.C:
					if u := l.Until(); !u.Equal(last) {
						last = u
						emit(Event{Kind: Renewed, Op: op, Until: now() + int64(time.Until(u))})
					}
				}
			}
		}()
		write(l, op, 1)
		if long {
			n := 2
			for end := time.Now().Add(3 * c.TTL); time.Now().Before(end) && l.Context().Err() == nil; n++ {
				time.Sleep(c.TTL / 5)
				write(l, op, n)
			}
		} else {
			time.Sleep(c.Hold)
			write(l, op, 2)
		}
		emit(Event{Kind: Release, Op: op})
		uctx, cancel := context.WithTimeout(ctx, c.Wait)
		err = l.Unlock(uctx)
		cancel()
		info := ""
		if err != nil {
			info = err.Error()
		}
		emit(Event{Kind: Released, Op: op, Info: info})
		<-done
	}
	return nil
}

// renew renews a lease every third of its TTL, for as long as a long hold
// lasts.
var renew = dlm.WithAutoRenew(1.0/3, time.Minute)

// open opens c.URL, with c.Plant's bug planted in the strategy.
func open(ctx context.Context, c clientConfig) (*dlm.Manager, io.Closer, error) {
	switch c.Plant {
	case "":
		return config.Open(ctx, c.URL, goredis.Dial, dlm.WithTTL(c.TTL), renew)
	case "stale-lease":
	default:
		return nil, nil, fmt.Errorf("unknown bug to plant %q", c.Plant)
	}
	cfg, err := config.ParseURL(c.URL)
	if err != nil {
		return nil, nil, err
	}
	var nodes []dlm.Node
	keep := func(ctx context.Context, ep config.Endpoint) (dlm.Node, io.Closer, error) {
		n, cl, err := goredis.Dial(ctx, ep)
		nodes = append(nodes, n)
		return n, cl, err
	}
	_, closer, err := cfg.Open(ctx, keep)
	if err != nil {
		return nil, nil, err
	}
	s, err := cfg.NewStrategy(nodes...)
	if err != nil {
		return nil, nil, err
	}
	m, err := dlm.New(staleLease{s, 3 * c.TTL}, append(cfg.ManagerOptions(), dlm.WithTTL(c.TTL), renew)...)
	return m, closer, err
}

// staleLease is a strategy with a bug planted: it skips the validity
// check, handing out leases that end later than the servers' keys.
type staleLease struct {
	dlm.Strategy
	extra time.Duration
}

func (s staleLease) Acquire(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	l, err := s.Strategy.Acquire(ctx, key, token, ttl)
	l.Until = l.Until.Add(s.extra)
	return l, err
}

func (s staleLease) Extend(ctx context.Context, key, token string, ttl time.Duration) (dlm.Lease, error) {
	l, err := s.Strategy.Extend(ctx, key, token, ttl)
	l.Until = l.Until.Add(s.extra)
	return l, err
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...interface{}) {}
