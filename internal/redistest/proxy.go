package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A Proxy is an in-process TCP proxy on a loopback port that forwards every
// connection to a target address. It can be told to drop traffic silently
// (while blackholed, bytes read from either side are discarded, connections
// stay open and nobody is told, as in a network partition) or to hold back
// every reply by a fixed delay (a slow link).
type Proxy struct {
	Addr string // 127.0.0.1:port to connect to instead of the target

	target string
	ln     net.Listener
	drop   atomic.Bool
	delay  atomic.Int64 // nanoseconds added before each server-to-client write
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// StartProxy starts a proxy to target and stops it when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Blackhole starts (on) or stops (off) dropping traffic. Bytes dropped while
// blackholed are gone: a client that resumes sees a broken protocol stream
// and must reconnect.
func (p *Proxy) Blackhole(on bool) { p.drop.Store(on) }

// SetDelay makes the proxy hold back everything the server sends by d
// before passing it on; 0 forwards at once.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Blackholed reports whether traffic is being dropped.
func (p *Proxy) Blackholed() bool { return p.drop.Load() }

// CloseConns closes every proxied connection (the listener stays open).
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, false) }()
	go func() { defer wg.Done(); p.pipe(client, server, true) }()
	wg.Wait()
}

// pipe copies src to dst until either fails, dropping bytes while
// blackholed and delaying replies when asked, and then closes both.
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && reply {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
		}
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
