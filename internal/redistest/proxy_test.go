package redistest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestProxyForwardsAndBlackholes(t *testing.T) {
	srv := Start(t)
	p := StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	p.Blackhole(true)
	if !p.Blackholed() {
		t.Fatal("Blackholed() = false after Blackhole(true)")
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Get(tctx, "k").Err()
	cancel()
	if err == nil {
		t.Fatal("a command got a reply through a blackholed proxy")
	}
	// The server itself still answers.
	direct := srv.Client(t)
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("direct GET = %q, %v", v, err)
	}

	p.Blackhole(false)
	p.CloseConns() // the old stream lost bytes; start clean
	var v string
	for range 20 {
		if v, err = c.Get(ctx, "k").Result(); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || v != "v" {
		t.Fatalf("after the blackhole ended: %q, %v", v, err)
	}
}

// A delayed reply arrives no sooner than the delay after the command, and
// the delay ends with SetDelay(0).
func TestProxyDelaysReplies(t *testing.T) {
	srv := Start(t)
	p := StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const d = 300 * time.Millisecond
	p.SetLatency(d, 50*time.Millisecond)
	start := time.Now()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("through a slow proxy: %v", err)
	}
	if took := time.Since(start); took < d {
		t.Errorf("a reply delayed %v arrived after %v", d, took)
	}
	// A command that gives up first sees no reply, while the server ran it.
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := c.Incr(tctx, "n").Err()
	cancel()
	if err == nil {
		t.Error("a reply delayed 300ms arrived within 100ms")
	}
	p.SetDelay(0)
	if v, err := srv.Client(t).Get(ctx, "n").Result(); err != nil || v != "1" {
		t.Errorf("the server's counter = %q, %v; want 1: the command reached it", v, err)
	}
}

// While replies are cut, commands run on the server and their client gets
// no reply: the connection closes.
func TestProxyCutsReplies(t *testing.T) {
	srv := Start(t)
	p := StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.CutReplies(true)
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := c.Incr(tctx, "n").Err()
	ended := tctx.Err()
	cancel()
	if err == nil || ended != nil {
		t.Errorf("INCR with replies cut: %v (context: %v); want the connection closed before the deadline", err, ended)
	}
	p.CutReplies(false)
	if v, err := srv.Client(t).Get(ctx, "n").Result(); err != nil || v != "1" {
		t.Errorf("the server's counter = %q, %v; want 1: the command ran once", v, err)
	}
	if err := c.Incr(ctx, "n").Err(); err != nil {
		t.Errorf("after the cut ended: %v", err)
	}
}

// While hanging, connects to the proxy neither complete nor are refused;
// afterwards the proxy forwards again on the same address.
func TestProxyHangsConnects(t *testing.T) {
	srv := Start(t)
	p := StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Hang(true); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", p.Addr, 300*time.Millisecond)
	if err == nil {
		conn.Close()
		t.Fatal("a connect completed while connects hang")
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a connect while connects hang: %v; want a timeout, not a refusal", err)
	}
	if err := p.Hang(false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the hang ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A connection accepted while its server side is still being dialled is
// closed by Hang too, and never forwarded: a client that dialled eagerly
// (a pool opening its connections in its constructor, just before a fault)
// must not keep a working connection through it (issue 53).
func TestProxyHangClosesConnectionsMidDial(t *testing.T) {
	srv := Start(t)
	p := StartProxy(t, srv.Addr)
	dialing, release := make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.dialTarget = func() (net.Conn, error) {
		close(dialing)
		<-release
		return net.Dial("tcp", srv.Addr)
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-dialing:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not dial the server")
	}
	if err := p.Hang(true); err != nil {
		t.Fatalf("Hang: %v", err)
	}
	defer func() { _ = p.Hang(false) }()
	close(release) // the server's side connects after the fault began
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return // closed: as wanted
	}
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("a connection accepted before Hang, its server dialled after, was forwarded: read %q", buf[:n])
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection accepted before Hang was left open (not closed by it)")
	}
}
