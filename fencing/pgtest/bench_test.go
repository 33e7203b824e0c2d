package pgtest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlmgo/dlm/fencing"
)

// BenchmarkWrite compares one transaction that updates a row with the same
// transaction fenced by SQL.Check, on one connection, in the same run:
// the difference is the cost of the fence (one more statement).
func BenchmarkWrite(b *testing.B) {
	db := setup(b)
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	update := func(tx *sql.Tx, v int) error {
		_, err := tx.ExecContext(ctx, `UPDATE data SET value = $1 WHERE id = 1`, v)
		return err
	}
	b.Run("plain", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := update(tx, i); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	var fence uint64 // grows across the sub-benchmark's runs
	b.Run("fenced", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := (fencing.SQL{}).Check(ctx, tx, "orders:42", fence/4+1); err != nil {
				b.Fatal(err)
			}
			if err := update(tx, i); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			fence++
		}
	})
}
