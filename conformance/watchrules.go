package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// More rules of Node.Watch: only its own channel, after its connection
// is killed, while the server cannot be reached.

// deliverWithin bounds the wait for a published message.
const deliverWithin = 5 * time.Second

// watchInto watches channel on c's node, sending every payload to the
// returned channel (dropping them when it is full), and stops the watch
// when t ends.
func watchInto(t *testing.T, cx context.Context, c *nodeCase, channel string) (<-chan string, func(), error) {
	t.Helper()
	got := make(chan string, 256)
	stop, err := c.Watch(cx, channel, func(p string) {
		select {
		case got <- p:
		default:
		}
	})
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(stop)
	return got, stop, nil
}

// next returns the next payload of got, failing t when none arrives within
// deliverWithin.
func next(t *testing.T, got <-chan string, what string) string {
	t.Helper()
	select {
	case p := <-got:
		return p
	case <-time.After(deliverWithin):
		t.Fatalf("%s: no message delivered within %v", what, deliverWithin)
		return ""
	}
}

func testWatchOwnChannel(t *testing.T, c *nodeCase) {
	// b's name begins with a's: a pattern subscription would take both.
	a, b := c.key("chan"), c.key("chan-b")
	gotA, _, err := watchInto(t, ctx(t), c, a)
	skipUnsupported(t, "Watch", err)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	gotB, _, err := watchInto(t, ctx(t), c, b)
	if err != nil {
		t.Fatalf("Watch of a second channel: %v", err)
	}
	publish := c.script(publishScript)
	c.eval(t, publish, []string{b}, "for b")
	c.eval(t, publish, []string{a}, "for a")
	c.eval(t, publish, []string{b}, "for b again")
	if p := next(t, gotA, "Watch of channel a"); p != "for a" {
		t.Errorf("on the %s node, the Watch of channel a first got %q, want %q: notify must get its own channel's messages only", c.which, p, "for a")
	}
	for _, want := range []string{"for b", "for b again"} {
		if p := next(t, gotB, "Watch of channel b"); p != want {
			t.Errorf("on the %s node, the Watch of channel b got %q, want %q: notify must get its own channel's messages only, in order", c.which, p, want)
			break
		}
	}
}

func testWatchResubscribes(t *testing.T, c *nodeCase) {
	channel := c.key("channel")
	got, _, err := watchInto(t, ctx(t), c, channel)
	skipUnsupported(t, "Watch", err)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	publish := c.script(publishScript)
	c.eval(t, publish, []string{channel}, "before")
	if p := next(t, got, "before the kill"); p != "before" {
		t.Fatalf("notify got %q, want %q", p, "before")
	}
	killed, err := transport.Do(c.tr.Addr, 5*time.Second, "CLIENT", "KILL", "TYPE", "pubsub")
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	if killed == "0" {
		t.Fatalf("on the %s node, CLIENT KILL TYPE pubsub killed no connection: the subscription is on none in pub/sub mode", c.which)
	}
	// Publish until a message arrives: messages published before the
	// subscription is made again are lost, as Watch's contract allows.
	deadline := time.Now().Add(2 * deliverWithin)
	for i := 1; ; i++ {
		cx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = c.evalCtx(t, cx, publish, []string{channel}, fmt.Sprintf("after %d", i)) // the node's own connections may have been killed too
		cancel()
		select {
		case p := <-got:
			if !strings.HasPrefix(p, "after ") {
				t.Fatalf("notify got %q, want a message published after the kill", p)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("on the %s node, none of %d messages published in the %v after the server killed the Watch's connection (CLIENT KILL TYPE pubsub) was delivered: Watch must subscribe again on a new connection",
				c.which, i, 2*deliverWithin)
		}
	}
}

// watchDialing is the deadline of the Watch that DialDeadline's other
// Watches must not wait for.
const watchDialing = 1500 * time.Millisecond

func testWatchDialDeadline(t *testing.T, c *nodeCase) {
	heal := hang(t, c)
	defer heal()
	// watch runs Watch with a deadline d away on a goroutine of its own,
	// which a dial that ignores the context keeps.
	watch := func(nc *nodeCase, channel string, d time.Duration) <-chan error {
		done := make(chan error, 1)
		go func() {
			cx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			stop, err := nc.Watch(cx, channel, func(string) {})
			if err == nil {
				stop()
			}
			done <- err
		}()
		return done
	}
	check := func(nc *nodeCase, what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			skipUnsupported(t, "Watch", err)
			if err == nil {
				t.Fatalf("on the %s node, %s succeeded: every connection to the server was closed", nc.which, what)
			}
		case <-time.After(returnBy):
			t.Fatalf("on the %s node, %s had not returned after %v: Watch must honour its context while it connects, and not wait for another Watch's connect", nc.which, what, returnBy)
		}
	}
	for _, nc := range c.both() {
		check(nc, fmt.Sprintf("a Watch with %s, made while TCP connects to the server hang,", byDeadline.what), watch(nc, c.key("alone-"+nc.which), callLimit))
		long := watch(nc, c.key("long-"+nc.which), watchDialing)
		time.Sleep(stallLead) // let the first Watch start connecting
		check(nc, fmt.Sprintf("a Watch with %s, made while TCP connects hang and another Watch with a %v deadline connects,", byDeadline.what, watchDialing), watch(nc, c.key("short-"+nc.which), callLimit))
		select {
		case <-long:
		case <-time.After(watchDialing + returnBy):
			t.Fatalf("on the %s node, a Watch with a %v deadline, made while TCP connects hang, had not returned after %v", nc.which, watchDialing, watchDialing+returnBy)
		}
	}
	heal()
	for _, nc := range c.both() {
		channel := c.key("after-" + nc.which)
		// One Watch, with time for a client that backs off after failed
		// dials (go-redis: DialTimeout, 5s by default, per attempt).
		start := time.Now()
		cx, cancel := context.WithTimeout(context.Background(), 2*callTimeout)
		got, _, err := watchInto(t, cx, nc, channel)
		cancel()
		if err != nil {
			t.Fatalf("on the %s node, Watch once the server was reachable again: %v after %v", nc.which, err, time.Since(start).Round(time.Millisecond))
		}
		t.Logf("on the %s node, Watch once the server was reachable again took %v", nc.which, time.Since(start).Round(time.Millisecond))
		publishAnswered(t, nc, channel, "healed")
		if p := next(t, got, "Watch once the server was reachable again"); p != "healed" {
			t.Errorf("on the %s node, once the server was reachable again, notify got %q, want %q", nc.which, p, "healed")
		}
	}
}

// publishAnswered publishes payload on channel through c's node once a
// fault was healed, retrying errors for up to callTimeout.
func publishAnswered(t *testing.T, c *nodeCase, channel, payload string) {
	t.Helper()
	publish := c.script(publishScript)
	for deadline := time.Now().Add(callTimeout); ; time.Sleep(50 * time.Millisecond) {
		cx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.evalCtx(t, cx, publish, []string{channel}, payload)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("on the %s node, after the fault was healed: publishing: %v", c.which, err)
		}
	}
}
