package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// A Proxy forwards TCP connections on a loopback port to a server and holds
// back everything the server sends by a fixed delay: a slow link.
type Proxy struct {
	Addr string

	ln    net.Listener
	delay time.Duration
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy starts a Proxy to target that delays every reply by delay, and
// closes it when the test ends.
func StartProxy(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve(target)
	t.Cleanup(p.close)
	return p
}

func (p *Proxy) serve(target string) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go func() { // client to server, at once
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			s.Close()
			c.Close()
		}()
		go func() { // server to client, late
			defer p.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					time.Sleep(p.delay)
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			s.Close()
			c.Close()
		}()
	}
}

// track records both ends of a connection so close can end them; it reports
// false when the proxy is already closed.
func (p *Proxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		s.Close()
		return false
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
