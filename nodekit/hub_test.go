package nodekit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/nodekit"
)

// A fakePubSub confirms each subscription from inside Subscribe, as a
// driver that reads the confirmation while it waits would.
type fakePubSub struct {
	ev nodekit.Events
	mu sync.Mutex
	on map[string]bool
}

func (f *fakePubSub) Subscribe(_ context.Context, channels ...string) error {
	for _, ch := range channels {
		f.mu.Lock()
		f.on[ch] = true
		f.mu.Unlock()
		f.ev.Subscribed(ch)
	}
	return nil
}

func (f *fakePubSub) Unsubscribe(_ context.Context, channels ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range channels {
		delete(f.on, ch)
	}
	return nil
}

func (f *fakePubSub) Close() error { return nil }

// Events reported from inside Subscribe reach the Hub (it does not hold
// the lock they take while it calls the PubSub).
func TestHubEventsInsideSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ps *fakePubSub
		h := nodekit.NewHub(func(_ context.Context, ev nodekit.Events) (nodekit.PubSub, error) {
			ps = &fakePubSub{ev: ev, on: map[string]bool{}}
			return ps, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got := make(chan string, 1)
		stop, err := h.Watch(ctx, "ch", func(p string) { got <- p })
		if err != nil {
			t.Fatalf("Watch with a PubSub that confirms from inside Subscribe: %v (a Hub calling it under its lock deadlocks until the context ends)", err)
		}
		ps.ev.Message("ch", "hello")
		if p := <-got; p != "hello" {
			t.Errorf("notify got %q", p)
		}
		stop()
		synctest.Wait()
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if ps.on["ch"] {
			t.Error("the channel is still subscribed after stop")
		}
	})
}

// A Watch whose connect hangs holds up another Watch on the same Hub only
// until the other's own context ends; the connect gets the first Watch's
// context.
func TestHubConnectHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := nodekit.NewHub(func(ctx context.Context, _ nodekit.Events) (nodekit.PubSub, error) {
			<-ctx.Done() // the server cannot be reached
			return nil, ctx.Err()
		})
		long := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := h.Watch(ctx, "a", func(string) {})
			long <- err
		}()
		synctest.Wait() // the first Watch is connecting
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := h.Watch(ctx, "b", func(string) {})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 100*time.Millisecond {
			t.Errorf("a Watch with a 100ms deadline while another connects: error %v after %v; want its deadline's error at its deadline", err, time.Since(start))
		}
		if err := <-long; !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Minute {
			t.Errorf("the Watch whose connect hung: %v after %v; want its own deadline's error", err, time.Since(start))
		}
	})
}
