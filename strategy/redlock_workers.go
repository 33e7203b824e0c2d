package strategy

import (
	"sync"
	"time"
)

// workers runs Redlock's per-node calls on goroutines that are kept for a
// while after their call ends. A client library's call grows a fresh
// goroutine's stack several times; a kept goroutine has grown it already.
// An idle goroutine exits after one to two workerIdle periods.
var workers workerPool

const (
	workerIdle    = time.Second
	maxIdleWorker = 256
)

// A task is the call of round r to node i.
type task struct {
	r *round
	i int
}

type workerPool struct {
	mu       sync.Mutex
	idle     []*worker // the most recently idle last
	gen      uint64    // sweeps so far
	sweeping bool      // a sweeper goroutine runs while any worker is idle
}

type worker struct {
	ch  chan task // capacity 1: handing work over never blocks; the zero task: exit
	gen uint64    // the sweep count when it last went idle (guarded by mu)
}

// run runs t on an idle worker or a new goroutine.
func (p *workerPool) run(t task) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.ch <- t
		return
	}
	p.mu.Unlock()
	go p.work(&worker{ch: make(chan task, 1)}, t)
}

func (p *workerPool) work(w *worker, t task) {
	for {
		t.r.call(t.i)
		p.mu.Lock()
		if len(p.idle) >= maxIdleWorker {
			p.mu.Unlock()
			return
		}
		w.gen = p.gen
		p.idle = append(p.idle, w)
		if !p.sweeping {
			p.sweeping = true
			go p.sweep()
		}
		p.mu.Unlock()
		if t = <-w.ch; t.r == nil {
			return
		}
	}
}

// sweep ends, every workerIdle, the workers that have been idle since before
// the previous sweep, and returns once none is idle. No timer per call.
func (p *workerPool) sweep() {
	for {
		time.Sleep(workerIdle)
		p.mu.Lock()
		keep := p.idle[:0]
		for _, w := range p.idle {
			if w.gen != p.gen {
				w.ch <- task{} // idle since before the last sweep: exit
			} else {
				keep = append(keep, w)
			}
		}
		clear(p.idle[len(keep):])
		p.idle = keep
		p.gen++
		if len(p.idle) == 0 {
			p.sweeping = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}
