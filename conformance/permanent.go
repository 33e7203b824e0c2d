package conformance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// testPermanentErrors drives the driver into error replies on real servers
// and checks that each comes back as a *driver.ReplyError with the server's
// code, which dlm.Permanent classifies the same on every driver.
func testPermanentErrors(t *testing.T, c *nodeCase) {
	ref, err := c.tr.Refusers(t)
	if err != nil {
		t.Fatal(err)
	}
	src := c.script("return {1}")
	unknownCommand := permanentReply("ERR", "unknown command")
	t.Run("EVAL renamed away", func(t *testing.T) {
		checkErrs(t, scriptRuns(t, c.dialOrFailing(t, ref.NoScripting), src, []string{c.key("k")}), unknownCommand)
	})
	t.Run("a Sentinel's port", func(t *testing.T) {
		checkErrs(t, scriptRuns(t, c.dialOrFailing(t, ref.Sentinel), src, []string{c.key("k")}), unknownCommand)
	})
	t.Run("NOAUTH", func(t *testing.T) {
		checkErrs(t, scriptRuns(t, c.dialOrFailing(t, ref.NeedsAuth), src, []string{c.key("k")}), permanentReply("NOAUTH", ""))
	})
	t.Run("NOPERM", func(t *testing.T) {
		checkErrs(t, scriptRuns(t, c.dialOrFailing(t, ref.NoPerm), src, []string{c.key("k")}), permanentReply("NOPERM", ""))
	})
	t.Run("WRONGTYPE", func(t *testing.T) {
		key := c.key("list")
		c.eval(t, c.script("redis.call('RPUSH', KEYS[1], 'x') redis.call('PEXPIRE', KEYS[1], 60000) return {1}"), []string{key})
		checkErrs(t, scriptRuns(t, c.Node, c.script("redis.call('GET', KEYS[1]) return {1}"), []string{key}), permanentReply("WRONGTYPE", ""))
	})
	t.Run("a script's own error", func(t *testing.T) {
		checkErrs(t, scriptRuns(t, c.Node, c.script("return redis.error_reply('ERR the script refuses')"), []string{c.key("k")}), transientErr)
	})
	t.Run("BUSY", func(t *testing.T) { testBusyReply(t, c, ref.Busy, src) })
	t.Run("connection refused", func(t *testing.T) {
		checkErrs(t, scriptRuns(t, c.dialOrFailing(t, ref.Refused), src, []string{c.key("k")}), transientErr)
	})
	t.Run("unknown master name", func(t *testing.T) { testUnknownMaster(t, c, ref, src) })
}

// scriptRuns makes the calls of one script on n: EVAL and EVALSHA alone,
// and both in one batch; it returns each call's error with its name.
func scriptRuns(t *testing.T, n driver.Node, src string, keys []string) map[string]error {
	sha := eval.NewScript(src).SHA1()
	out := map[string]error{}
	if n == nil {
		t.Fatal("the dial returned neither a Node nor an error")
	}
	for _, r := range []struct {
		name  string
		calls []driver.Call
	}{
		{"Run of one EVAL", []driver.Call{{Source: src, Keys: keys}}},
		{"Run of one EVALSHA", []driver.Call{{SHA1: sha, Keys: keys}}},
		{"Run of a batch, its first call", []driver.Call{{Source: src, Keys: keys}, {SHA1: sha, Keys: keys}}},
	} {
		cx, cancel := context.WithTimeout(context.Background(), callTimeout)
		n.Run(cx, r.calls)
		cancel()
		settled(t, r.name, r.calls)
		out[r.name] = r.calls[0].Err
	}
	return out
}

// permanentReply checks a reply that waiting cannot cure: a
// *driver.ReplyError with code and a message that begins msgPrefix.
func permanentReply(code, msgPrefix string) func(t *testing.T, what string, err error) {
	return func(t *testing.T, what string, err error) {
		t.Helper()
		var re *driver.ReplyError
		switch {
		case err == nil:
			t.Errorf("%s succeeded: the server refuses it with %s", what, code)
		case !errors.As(err, &re):
			t.Errorf("%s: error %q (%T) is not a *driver.ReplyError: a driver maps its client's error replies (code and message) so that dlm.Permanent classifies them by meaning", what, err, err)
		case re.Code != code || !strings.HasPrefix(re.Message, msgPrefix):
			t.Errorf("%s: reply %q has code %q and message %q, want code %q and a message that begins %q (the server's reply, whatever the client's wording)", what, err, re.Code, re.Message, code, msgPrefix)
		case !dlm.Permanent(err):
			t.Errorf("%s: dlm.Permanent(%q) is false", what, err)
		case errors.Is(err, driver.ErrNoScript):
			t.Errorf("%s: %q matches driver.ErrNoScript", what, err)
		}
	}
}

// transientErr checks an error that the deployment can cure.
func transientErr(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded: the server cannot answer it", what)
	} else if dlm.Permanent(err) {
		t.Errorf("%s: dlm.Permanent(%q) is true: the deployment can cure it while a Lock waits", what, err)
	}
}

// checkErrs checks each error of errs with f.
func checkErrs(t *testing.T, errs map[string]error, f func(t *testing.T, what string, err error)) {
	t.Helper()
	for what, err := range errs {
		f(t, what, err)
	}
}

// dialOrFailing returns a node for addr, or one whose calls fail with the
// dial's error.
func (c *nodeCase) dialOrFailing(t *testing.T, addr string) driver.Node {
	n, err := c.tr.Dial(t, addr)
	if err != nil {
		return failing{err}
	}
	return n
}

// testBusyReply checks that a server busy running a script (at addr)
// answers with a transient BUSY *driver.ReplyError.
func testBusyReply(t *testing.T, c *nodeCase, addr, src string) {
	n, err := c.tr.Dial(t, addr)
	if err != nil {
		t.Fatalf("dialling a server that was not busy yet: %v", err)
	}
	if _, err := c.on(n, "busy").call(t, ctx(t), driver.Call{Source: src, Keys: []string{c.key("k")}}); err != nil {
		t.Fatalf("a call before the server was made busy: %v", err)
	}
	stop := busy(t, addr)
	errs := scriptRuns(t, n, src, []string{c.key("k")})
	stop()
	checkErrs(t, errs, func(t *testing.T, what string, err error) {
		t.Helper()
		var re *driver.ReplyError
		if !errors.As(err, &re) || re.Code != "BUSY" {
			t.Errorf("%s: error %q (%T), want a *driver.ReplyError with code BUSY", what, err, err)
		}
		transientErr(t, what, err)
	})
}

// testUnknownMaster checks, through the driver's Sentinel dial, that a
// master name no Sentinel knows is a permanent driver.ErrUnknownMaster, a
// Sentinel that refuses connections a transient error, and the known name
// no error.
func testUnknownMaster(t *testing.T, c *nodeCase, ref *transport.Refusers, src string) {
	if c.tr.DialSentinel == nil {
		t.Skip("the driver's Sentinel dial was not given: harness.WithSentinel")
	}
	master := "no-such-master-" + c.run
	err := sentinelErr(t, c.tr, []string{ref.Sentinel}, master, src, c.key("k"))
	switch {
	case err == nil:
		t.Errorf("a master name no Sentinel knows led to a server")
	case !errors.Is(err, driver.ErrUnknownMaster) || !dlm.Permanent(err) || !strings.Contains(err.Error(), master):
		t.Errorf("a master name no Sentinel knows: error %q (permanent: %v), want one that matches driver.ErrUnknownMaster, is permanent and names %q", err, dlm.Permanent(err), master)
	}
	if err := sentinelErr(t, c.tr, []string{ref.Refused}, master, src, c.key("k")); err == nil || dlm.Permanent(err) {
		t.Errorf("a Sentinel that refuses connections: error %v (permanent: %v), want a transient one", err, dlm.Permanent(err))
	}
	if err := sentinelErr(t, c.tr, []string{ref.Sentinel}, ref.Master, src, c.key("k")); err != nil {
		t.Errorf("the master name the Sentinel knows: %v", err)
	}
}

// sentinelErr dials master through the Sentinels at addrs with the
// driver's Sentinel dial and returns the dial's error, or that of a call.
func sentinelErr(t *testing.T, tr *transport.Transport, addrs []string, master, src, key string) error {
	t.Helper()
	n, err := tr.DialSentinel(t, addrs, master)
	if err != nil {
		return err
	}
	if n == nil {
		t.Fatal("the Sentinel dial returned neither a Node nor an error")
	}
	cx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	calls := []driver.Call{{Source: src, Keys: []string{key}}}
	n.Run(cx, calls)
	settled(t, "Run", calls)
	return calls[0].Err
}

// busy makes the server at addr run a script until stop is called (at
// most 20s), and returns once it answers BUSY.
func busy(t *testing.T, addr string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// SCRIPT KILL ends a script that wrote nothing.
			for {
				if _, err := transport.Do(addr, time.Second, "SCRIPT", "KILL"); err != nil && strings.Contains(err.Error(), "NOTBUSY") {
					break
				}
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			<-done
		})
	}
	go func() {
		defer close(done)
		_, _ = transport.Do(addr, 30*time.Second, "EVAL", transport.BusyScript, "0", "20000000")
	}()
	t.Cleanup(stop)
	for deadline := time.Now().Add(callTimeout); ; {
		_, err := transport.Do(addr, time.Second, "PING")
		if err != nil && strings.Contains(err.Error(), "BUSY") {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server at %s did not answer BUSY while a script ran: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failing is a Node whose every call fails with err: a dial's error.
type failing struct{ err error }

func (f failing) Run(_ context.Context, calls []driver.Call) {
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, f.err
	}
}

func (f failing) RunWait(_ context.Context, calls []driver.Call, _ driver.Wait) (driver.Acks, error) {
	f.Run(context.Background(), calls)
	return driver.Acks{}, f.err
}

func (f failing) Watch(context.Context, string, func(string)) (func(), error) { return nil, f.err }
