package runner_test

import (
	"testing"

	"github.com/dlmgo/dlm/internal/runner"
)

// BenchmarkPool hands jobs to a Pool from 64 goroutines, five at a time as
// Redlock's fan-out to five nodes does, each waiting for its five.
func BenchmarkPool(b *testing.B) {
	p := runner.New(func(done chan struct{}) { done <- struct{}{} })
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan struct{}, 5)
		for pb.Next() {
			for range 5 {
				p.Go(done)
			}
			for range 5 {
				<-done
			}
		}
	})
}
