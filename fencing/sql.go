package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
)

// DefaultTable is the table SQL uses when its Table is empty.
const DefaultTable = "dlm_fences"

// Schema is the table SQL expects, for DefaultTable; CreateTable runs it (with
// the table's name). As a migration:
//
//	CREATE TABLE IF NOT EXISTS dlm_fences (
//	    resource TEXT PRIMARY KEY,
//	    fence    BIGINT NOT NULL CHECK (fence > 0)
//	);
//
// One row per resource ever fenced; a row is small (the name and 8 bytes)
// and is never deleted by this package.
const Schema = `CREATE TABLE IF NOT EXISTS dlm_fences (
    resource TEXT PRIMARY KEY,
    fence    BIGINT NOT NULL CHECK (fence > 0)
)`

// SQL records fences in a table of a SQL database, inside the caller's
// transactions.
//
// Databases: PostgreSQL (9.5 or later, for ON CONFLICT; tested against
// PostgreSQL 15 with lib/pq). The statement uses $1-style placeholders;
// SQLite (3.24 or later) accepts the same statement but is not tested;
// MySQL has no ON CONFLICT and is not supported.
//
// Isolation: READ COMMITTED (PostgreSQL's default and its weakest level) is
// enough. The upsert locks the resource's row until the transaction ends;
// a second transaction upserting the same resource waits for that lock and,
// once the first commits, evaluates its WHERE against the committed row, so
// it sees the larger fence and is refused. Under REPEATABLE READ or
// SERIALIZABLE the waiting transaction fails with the database's
// serialization error (SQLSTATE 40001, not ErrStale) whatever its fence;
// a retry sees the committed fence.
type SQL struct {
	// Table names the table, optionally schema-qualified (letters, digits
	// and underscores; "public.fences"). Empty means DefaultTable.
	Table string
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func (s SQL) table() (string, error) {
	if s.Table == "" {
		return DefaultTable, nil
	}
	if len(s.Table) > 127 || !identifier.MatchString(s.Table) {
		return "", fmt.Errorf("%w: fencing: table name %.40q is not an identifier", dlm.ErrInvalid, s.Table)
	}
	return s.Table, nil
}

// CreateTable creates the table (see Schema) unless it exists.
func (s SQL) CreateTable(ctx context.Context, db *sql.DB) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
    resource TEXT PRIMARY KEY,
    fence    BIGINT NOT NULL CHECK (fence > 0)
)`)
	if err != nil {
		return errs.Within(fmt.Sprintf("fencing: create table %s", t), err)
	}
	return nil
}

// Check records fence for resource in tx with one statement (an upsert whose
// update applies only when the recorded fence is not larger), and refuses
// when a larger fence was recorded first: then tx is rolled back and the
// error matches ErrStale. Equal fences are accepted. Call it before or after
// the writes it protects, in the same transaction, and commit only when it
// returns nil.
//
// On any error tx is rolled back, so a caller that ignores the error cannot
// commit the writes: bad input (dlm.ErrInvalid; the fence must be at most
// math.MaxInt64, the column being a BIGINT), a transaction already ended
// (sql.ErrTxDone), or the database's error.
func (s SQL) Check(ctx context.Context, tx *sql.Tx, resource string, fence uint64) error {
	if tx == nil {
		return fmt.Errorf("%w: fencing: nil transaction", dlm.ErrInvalid)
	}
	err := s.check(ctx, tx, resource, fence)
	if err != nil {
		_ = tx.Rollback()
	}
	return err
}

func (s SQL) check(ctx context.Context, tx *sql.Tx, resource string, fence uint64) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	if err := check(resource, fence); err != nil {
		return err
	}
	if fence > math.MaxInt64 {
		return fmt.Errorf("%w: fencing: fence %d above the BIGINT column's range", dlm.ErrInvalid, fence)
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO `+t+` (resource, fence) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence WHERE `+t+`.fence <= EXCLUDED.fence`,
		resource, int64(fence))
	if err != nil {
		return errs.Within(fmt.Sprintf("fencing: record fence %d for %.64q", fence, resource), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return errs.Within(fmt.Sprintf("fencing: record fence %d for %.64q", fence, resource), err)
	}
	if n == 0 {
		return fmt.Errorf("%w (resource %.64q, fence %d)", ErrStale, resource, fence)
	}
	return nil
}

// Update runs fn in a transaction of db (default isolation, READ COMMITTED
// on PostgreSQL) that Check fences, and commits it when fn returns nil. A
// nil fn only records the fence.
func (s SQL) Update(ctx context.Context, db *sql.DB, resource string, fence uint64, fn func(*sql.Tx) error) error {
	if db == nil {
		return fmt.Errorf("%w: fencing: nil database", dlm.ErrInvalid)
	}
	if _, err := s.table(); err != nil {
		return err
	}
	if err := check(resource, fence); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return errs.Within("fencing: begin", err)
	}
	if err := s.Check(ctx, tx, resource, fence); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(tx); err != nil {
			return errors.Join(err, tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return errs.Within("fencing: commit", err)
	}
	return nil
}

// Store returns the Store that records fences in db's table, each Advance
// in a transaction of its own.
func (s SQL) Store(db *sql.DB) Store { return sqlStore{s, db} }

type sqlStore struct {
	s  SQL
	db *sql.DB
}

func (st sqlStore) Advance(ctx context.Context, resource string, fence uint64) error {
	return st.s.Update(ctx, st.db, resource, fence, nil)
}
