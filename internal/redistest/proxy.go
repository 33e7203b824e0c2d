package redistest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A Proxy is an in-process TCP proxy that forwards every connection to a
// target address, and injects faults on the way:
//
//   - Blackhole drops traffic silently both ways (connections stay open and
//     nobody is told, as in a network partition);
//   - SetDelay holds back every reply (server to client) by a delay plus a
//     random jitter, each reply counted from when it reached the proxy, in
//     order (a slow link);
//   - CutReplies lets commands reach the server and closes a connection
//     when a reply comes back on it, the reply dropped;
//   - Hang closes every connection and makes new connects hang (the SYNs
//     are never answered) until it is turned off.
//
// Every fault is in force on every connection, open ones included, when
// its method returns.
type Proxy struct {
	Addr string // host:port to connect to instead of the target

	target string
	wg     sync.WaitGroup
	drop   atomic.Bool
	cut    atomic.Bool
	delay  atomic.Int64 // nanoseconds added to each reply
	jitter atomic.Int64 // at most this many nanoseconds more, at random

	accepted atomic.Int64 // connections accepted so far

	mu     sync.Mutex
	ln     net.Listener     // nil while hanging or closed
	hang   *hangingListener // while connects hang
	conns  map[net.Conn]struct{}
	closed bool
	// dialTarget, when set (by tests), dials the target instead of
	// net.DialTimeout.
	dialTarget func() (net.Conn, error)
}

// StartProxy starts a proxy to target on a free loopback port and stops it
// when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy("127.0.0.1:0", target)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy listening on listen (host:port; port 0 for a
// free one) that forwards to target. The caller stops it (Close).
func NewProxy(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Blackhole starts (on) or stops (off) dropping traffic. Bytes dropped while
// blackholed are gone: a client that resumes sees a broken protocol stream
// and must reconnect.
func (p *Proxy) Blackhole(on bool) { p.drop.Store(on) }

// Blackholed reports whether traffic is being dropped.
func (p *Proxy) Blackholed() bool { return p.drop.Load() }

// SetDelay makes the proxy hold back everything the server sends by d
// before passing it on; 0 forwards at once.
func (p *Proxy) SetDelay(d time.Duration) { p.SetLatency(d, 0) }

// SetLatency holds back each reply by d plus a random part of jitter;
// replies keep their order. Zero for both forwards at once.
func (p *Proxy) SetLatency(d, jitter time.Duration) {
	p.delay.Store(int64(d))
	p.jitter.Store(int64(jitter))
}

// CutReplies starts (on) or stops (off) cutting replies: while on, bytes
// from clients reach the server, and a connection on which the server
// sends anything is closed both ways without passing a byte of it.
func (p *Proxy) CutReplies(on bool) { p.cut.Store(on) }

// Accepted reports how many connections the proxy has accepted: a client
// that is opening one has, once it grows.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// CloseConns closes every proxied connection (the listener stays open).
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeConnsLocked()
}

// closeConnsLocked closes every tracked connection and forgets it, so that
// serve, finding its client gone, does not forward a connection that was
// closed while its server side was being dialled. p.mu is held.
func (p *Proxy) closeConnsLocked() {
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Hang, on, closes the listener and every connection and binds Addr with a
// socket whose accept queue is full, so the kernel drops further SYNs and
// a connect waits until its own timeout (IPv4 only); off listens and
// forwards again on the same address.
func (p *Proxy) Hang(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || on == (p.hang != nil) {
		return nil
	}
	if !on {
		p.hang.close()
		p.hang = nil
		var err error
		for range 50 { // the port may be busy for a moment
			var ln net.Listener
			if ln, err = net.Listen("tcp", p.Addr); err == nil {
				p.ln = ln
				p.wg.Add(1)
				go p.accept(ln)
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("proxy: listening again on %s: %w", p.Addr, err)
	}
	_ = p.ln.Close()
	p.ln = nil
	p.closeConnsLocked()
	h, err := listenHanging(p.Addr)
	if err != nil {
		ln, lerr := net.Listen("tcp", p.Addr)
		if lerr == nil {
			p.ln = ln
			p.wg.Add(1)
			go p.accept(ln)
		}
		return errors.Join(err, lerr)
	}
	p.hang = h
	return nil
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	if p.hang != nil {
		p.hang.close()
		p.hang = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// trackPair tracks server alongside client, unless client is no longer
// tracked (a fault closed it meanwhile) or the proxy is closed.
func (p *Proxy) trackPair(client, server net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	if _, ok := p.conns[client]; !ok {
		return false
	}
	p.conns[server] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		// Tracked at once, before the server is dialled, unless a fault
		// closed this listener since Accept returned (then the connection
		// is one it must not forward).
		p.mu.Lock()
		current := p.ln == ln && p.conns != nil
		if current {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if !current {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards client, which accept tracked, to a new connection to the
// target. The client's connection is tracked before the target is dialled, so that a fault that
// closes every connection (Hang, CloseConns, Close) also closes one whose
// server side is still being dialled: a client that dialled eagerly (a
// pool opening its connections in its constructor) finds it closed, never
// forwarded after the fault began.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	dial := p.dialTarget
	p.mu.Unlock()
	if dial == nil {
		dial = func() (net.Conn, error) { return net.DialTimeout("tcp", p.target, 10*time.Second) }
	}
	server, err := dial()
	if err != nil {
		p.untrack(client)
		return
	}
	// The client may have been closed by a fault while the server was
	// dialled: track the server only if the client still is tracked.
	if !p.trackPair(client, server) {
		p.untrack(client)
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.requests(server, client) }()
	go func() { defer wg.Done(); p.replies(client, server) }()
	wg.Wait()
}

// requests copies src (the client) to dst (the server) until either
// fails, dropping bytes while blackholed, and then closes both.
func (p *Proxy) requests(dst, src net.Conn) {
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.drop.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A chunk is what one read from the server returned, with what the proxy
// does with it, decided when it arrived.
type chunk struct {
	b         []byte
	due       time.Time
	drop, cut bool
}

// replies copies src (the server) to dst (the client) as requests does,
// holding each chunk until its due time, or closing both at a chunk that
// arrived while replies were cut.
func (p *Proxy) replies(dst, src net.Conn) {
	defer p.untrack(dst)
	defer p.untrack(src)
	chunks := make(chan chunk, 64)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				c := chunk{b: append([]byte(nil), buf[:n]...), due: time.Now(), drop: p.drop.Load(), cut: p.cut.Load()}
				c.due = c.due.Add(time.Duration(p.delay.Load()))
				if j := p.jitter.Load(); j > 0 {
					c.due = c.due.Add(time.Duration(rand.Int64N(j)))
				}
				select {
				case chunks <- c:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if c.cut {
			return
		}
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if c.drop {
			continue
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// A hangingListener listens on an address without ever accepting, its
// accept queue filled, so the kernel drops further SYNs and a connect waits
// until its own timeout.
type hangingListener struct {
	fd    int
	conns []net.Conn // what fills the queue
}

func listenHanging(addr string) (*hangingListener, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	ip := net.ParseIP(host).To4()
	if err != nil || ip == nil {
		return nil, fmt.Errorf("hanging listener: want an IPv4 host:port, got %q", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	h := &hangingListener{fd: fd}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	sa := &syscall.SockaddrInet4{Port: port}
	copy(sa.Addr[:], ip)
	for range 50 { // the proxy's port may linger for a moment
		if err = syscall.Bind(fd, sa); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		err = syscall.Listen(fd, 0) // a backlog of 0 queues one connection
	}
	if err != nil {
		h.close()
		return nil, fmt.Errorf("hanging listener on %s: %w", addr, err)
	}
	// Fill the queue until a connect times out: then connects hang.
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return h, nil
		}
		h.conns = append(h.conns, c)
	}
	h.close()
	return nil, fmt.Errorf("hanging listener on %s: connects still complete with the accept queue full; this kernel answers them", addr)
}

func (h *hangingListener) close() {
	for _, c := range h.conns {
		_ = c.Close()
	}
	_ = syscall.Close(h.fd)
}
