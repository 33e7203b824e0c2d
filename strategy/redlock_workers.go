package strategy

import (
	"sync"
	"time"
)

// workers runs Redlock's per-node calls on goroutines that are kept for a
// while after their call ends. A client library's call grows a fresh
// goroutine's stack several times; a kept goroutine has grown it already.
// An idle goroutine exits after workerIdle.
var workers workerPool

const (
	workerIdle    = time.Second
	maxIdleWorker = 256
)

type workerPool struct {
	mu   sync.Mutex
	idle []*worker
}

type worker struct {
	ch    chan func() // capacity 1: handing work over never blocks
	timer *time.Timer
}

// run runs f on an idle worker or a new goroutine.
func (p *workerPool) run(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.ch <- f
		return
	}
	p.mu.Unlock()
	go p.work(&worker{ch: make(chan func(), 1)}, f)
}

func (p *workerPool) work(w *worker, f func()) {
	for {
		f()
		p.mu.Lock()
		if len(p.idle) >= maxIdleWorker {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		if w.timer == nil {
			w.timer = time.NewTimer(workerIdle)
		} else {
			w.timer.Reset(workerIdle)
		}
		select {
		case f = <-w.ch:
			w.timer.Stop()
			continue
		case <-w.timer.C:
		}
		p.mu.Lock()
		for i, v := range p.idle {
			if v == w {
				p.idle = append(p.idle[:i], p.idle[i+1:]...)
				p.mu.Unlock()
				return
			}
		}
		p.mu.Unlock()
		f = <-w.ch // taken just before the timer fired: its work is coming
	}
}
