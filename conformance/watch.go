package conformance

import (
	"context"
	"testing"
	"time"
)

// The rule of Node.Watch, skipped when Watch reports errors.ErrUnsupported.

func testWatchDelivers(t *testing.T, c *nodeCase) {
	channel := c.key("channel")
	got := make(chan string, 64)
	stop, err := c.Watch(ctx(t), channel, func(p string) {
		select {
		case got <- p:
		default:
		}
	})
	skipUnsupported(t, "Watch", err)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	publish := c.script(publishScript)
	for i, payload := range []string{"first", "second \x00\r\n"} {
		c.eval(t, publish, []string{channel}, payload)
		select {
		case p := <-got:
			if p != payload {
				t.Fatalf("message %d: notify got %q, want %q", i+1, p, payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a message published after Watch returned was not delivered within 5s (Watch must return once the server confirmed the subscription)")
		}
	}
	c.eval(t, publish, []string{c.key("other-channel")}, "elsewhere")
	stop()
	stopped = true
	stop() // a second call does nothing
	c.eval(t, publish, []string{channel}, "after stop")
	select {
	case p := <-got:
		t.Fatalf("notify got %q after stop returned, want no more calls (or a message of another channel)", p)
	case <-time.After(300 * time.Millisecond):
	}
	// Watch with an ended context fails.
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	if stop, err := c.Watch(cx, c.key("canceled"), func(string) {}); err == nil {
		stop()
		t.Errorf("Watch with a canceled context succeeded, want an error")
	}
}

// publishScript publishes as dlm's release script does: on a shard channel
// (SPUBLISH) on a Redis Cluster of version 7.0 or later, on an ordinary
// channel elsewhere.
const publishScript = `local publish = 'PUBLISH'
if (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  local ok, info = pcall(redis.call, 'INFO', 'cluster')
  if ok and type(info) == 'string' and string.find(info, 'cluster_enabled:1', 1, true) then
    publish = 'SPUBLISH'
  end
end
return {redis.call(publish, KEYS[1], ARGV[1])}`
