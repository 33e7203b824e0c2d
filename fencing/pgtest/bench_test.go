package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/dlmgo/dlm/fencing"
)

// BenchmarkWrite measures one transaction that updates a row and the same
// transaction fenced by SQL.Check (one more statement), on one connection,
// alternating the two within each iteration so that both see the same load
// on a busy machine. It reports plain-ns/write, fenced-ns/write and their
// difference, fence-ns/write.
func BenchmarkWrite(b *testing.B) {
	db := setup(b)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	one := func(i int, fence uint64) time.Duration {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if fence > 0 {
			if err := (fencing.SQL{}).Check(ctx, tx, "orders:42", fence); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data SET value = $1 WHERE id = 1`, i); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var plain, fenced time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // alternate which goes first
			plain += one(i, 0)
			fenced += one(i, uint64(i/4+1))
		} else {
			fenced += one(i, uint64(i/4+1))
			plain += one(i, 0)
		}
		n++
	}
	b.ReportMetric(float64(plain.Nanoseconds())/float64(n), "plain-ns/write")
	b.ReportMetric(float64(fenced.Nanoseconds())/float64(n), "fenced-ns/write")
	b.ReportMetric(float64((fenced-plain).Nanoseconds())/float64(n), "fence-ns/write")
}
