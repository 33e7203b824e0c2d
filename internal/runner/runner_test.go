package runner_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/internal/runner"
)

// A job never waits for another: one that blocks does not hold back the
// next. A goroutine that finished its job takes the next one, and every
// goroutine ends within two runner.Idle once idle: the bubble ends only
// then, and panics (goroutines left blocked) when one is still there.
func TestPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		ran := make(chan int, 3)
		p := runner.New(func(j int) {
			if j == 1 {
				<-release
			}
			ran <- j
		})
		p.Go(1)
		p.Go(2)
		if j := <-ran; j != 2 {
			t.Fatalf("ran %d first, want 2: the second job waited for the blocked one", j)
		}
		synctest.Wait() // the second job's goroutine is idle now
		p.Go(3)
		if j := <-ran; j != 3 {
			t.Fatalf("ran %d, want 3", j)
		}
		close(release)
		if j := <-ran; j != 1 {
			t.Fatalf("ran %d, want 1", j)
		}
		time.Sleep(2 * runner.Idle)
	})
}
