package strategy

import "time"

// workers runs a round's node calls on goroutines that outlive them: a call
// through a client library grows a new goroutine's stack several times (a
// copy each time), which a goroutine kept from an earlier call has already
// done. BenchmarkRedlockLockUnlock shows what it saves. The zero value is
// ready; a goroutine idle for workerIdle ends.
type workers struct {
	jobs chan func() // unbuffered: a send succeeds only when a worker is idle
}

const workerIdle = 10 * time.Second

func newWorkers() workers { return workers{jobs: make(chan func())} }

// run runs f on an idle worker, or on a new one when none is idle.
func (w workers) run(f func()) {
	select {
	case w.jobs <- f:
	default:
		go w.loop(f)
	}
}

func (w workers) loop(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // the job's memory is not kept while idle
		idle.Reset(workerIdle)
		select {
		case f = <-w.jobs:
		case <-idle.C:
			return
		}
	}
}
