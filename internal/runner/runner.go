// Package runner runs jobs on goroutines kept between jobs. A call through
// a client library grows a new goroutine's stack several times, a copy
// each time; a goroutine kept from an earlier job has done so already.
// Redlock's fan-out to its nodes and coalescing's batches run this way.
package runner

import (
	"sync"
	"sync/atomic"
	"time"
)

// Idle is how often a Pool looks for goroutines it no longer needs: those
// that stayed idle from one look to the next end, so an idle goroutine ends
// within two Idles. A test in virtual time (testing/synctest) that used a
// Pool sleeps 2×Idle before its bubble ends, or the bubble panics with the
// goroutines still waiting.
const Idle = 10 * time.Second

// A Pool runs do on its jobs, each on an idle goroutine of the pool, or on
// a new one when none is idle: a job never waits for another. An idle
// goroutine waits on the job channel with no timer of its own (a timer in
// that wait costs the runtime's timer heap twice per job): one timer per
// Pool, armed while it has goroutines, looks for spare ones every Idle.
type Pool[T any] struct {
	// jobs is unbuffered: a send succeeds only when a goroutine is idle. An
	// idle goroutine waits on it alone (a select over two channels locks
	// both on every job); a message with quit set asks it to end if spare.
	jobs  chan message[T]
	do    func(T)
	looks atomic.Int64 // how often the timer looked

	mu    sync.Mutex
	live  int         // goroutines
	sweep *time.Timer // armed while live > 0
}

// A message is a job, or with quit set the timer's offer to end.
type message[T any] struct {
	job  T
	quit bool
}

// New returns a Pool that runs do.
func New[T any](do func(T)) *Pool[T] {
	return &Pool[T]{jobs: make(chan message[T]), do: do}
}

// Go runs do(j) on one of the pool's goroutines.
func (p *Pool[T]) Go(j T) {
	select {
	case p.jobs <- message[T]{job: j}:
	default:
		p.mu.Lock()
		if p.live++; p.live == 1 {
			if p.sweep == nil {
				p.sweep = time.AfterFunc(Idle, p.look)
			} else {
				p.sweep.Reset(Idle)
			}
		}
		p.mu.Unlock()
		go p.loop(j)
	}
}

func (p *Pool[T]) loop(j T) {
	var zero T
	for {
		p.do(j)
		j = zero // the job's memory is not kept while idle
		done := p.looks.Load()
		for {
			m := <-p.jobs
			if !m.quit {
				j = m.job
				break
			}
			if p.looks.Load()-done >= 2 { // idle from one look to the next
				p.mu.Lock()
				p.live--
				p.mu.Unlock()
				return
			}
		}
	}
}

// look offers every goroutine of the pool a chance to end (those idle from
// the last look to this one do), and looks again after Idle while any are
// left.
func (p *Pool[T]) look() {
	p.looks.Add(1)
	p.mu.Lock()
	n := p.live
	p.mu.Unlock()
	for ; n > 0; n-- {
		select {
		case p.jobs <- message[T]{quit: true}:
		default:
			n = 0 // none waiting just now
		}
	}
	p.mu.Lock()
	if p.live > 0 {
		p.sweep.Reset(Idle)
	}
	p.mu.Unlock()
}
