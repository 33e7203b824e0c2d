package nodekit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"
)

// instantNode answers every script at once, in process: it measures what
// Script.Run itself costs.
type instantNode struct{}

func (instantNode) Run(_ context.Context, calls []driver.Call) {
	for i := range calls {
		calls[i].Reply = []int64{1}
	}
}

func (instantNode) RunWait(context.Context, []driver.Call, driver.Wait) (driver.Acks, error) {
	return driver.Acks{}, errors.ErrUnsupported
}

func (instantNode) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

// BenchmarkScriptRun is one script call through Script.Run, as every lock
// operation makes: its allocations are the reply's and nothing of its own.
func BenchmarkScriptRun(b *testing.B) {
	s := eval.NewScript("return {1}")
	keys, args := []string{"k"}, []string{"a"}
	var n driver.Node = instantNode{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Run(ctx, n, keys, args...); err != nil {
			b.Fatal(err)
		}
	}
}
