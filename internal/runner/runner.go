// Package runner runs jobs on goroutines kept between jobs. A call through
// a client library grows a new goroutine's stack several times, a copy
// each time; a goroutine kept from an earlier job has done so already.
// Redlock's fan-out to its nodes and coalescing's batches run this way.
package runner

import "time"

// Idle is how long a goroutine of a Pool waits for a job before it ends.
// A test in virtual time (testing/synctest) that used a Pool sleeps past
// it before its bubble ends.
const Idle = 10 * time.Second

// A Pool runs do on its jobs, each on an idle goroutine of the pool, or on
// a new one when none is idle: a job never waits for another.
type Pool[T any] struct {
	jobs chan T // unbuffered: a send succeeds only when a goroutine is idle
	do   func(T)
}

// New returns a Pool that runs do.
func New[T any](do func(T)) *Pool[T] {
	return &Pool[T]{jobs: make(chan T), do: do}
}

// Go runs do(j) on one of the pool's goroutines.
func (p *Pool[T]) Go(j T) {
	select {
	case p.jobs <- j:
	default:
		go p.loop(j)
	}
}

func (p *Pool[T]) loop(j T) {
	idle := time.NewTimer(Idle)
	defer idle.Stop()
	var zero T
	for {
		p.do(j)
		j = zero // the job's memory is not kept while idle
		idle.Reset(Idle)
		select {
		case j = <-p.jobs:
		case <-idle.C:
			return
		}
	}
}
