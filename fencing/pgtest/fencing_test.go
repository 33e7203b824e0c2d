package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/fencing"
)

// setup starts a server, creates the fence table and a data table
// (id, value) with one row, and returns the database.
func setup(t testing.TB) *sql.DB {
	db, _ := setupDSN(t)
	return db
}

func setupDSN(t testing.TB) (*sql.DB, string) {
	t.Helper()
	db, dsn := startPostgres(t)
	ctx := context.Background()
	if err := (fencing.SQL{}).CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := (fencing.SQL{}).CreateTable(ctx, db); err != nil { // again: IF NOT EXISTS
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE data (id INT PRIMARY KEY, value BIGINT NOT NULL)`,
		`INSERT INTO data VALUES (1, 0)`,
		`CREATE TABLE log (seq BIGSERIAL PRIMARY KEY, fence BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return db, dsn
}

// write sets data's value to fence and logs it, fenced, in one transaction.
func write(ctx context.Context, db *sql.DB, resource string, fence uint64) error {
	return fencing.SQL{}.Update(ctx, db, resource, fence, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE data SET value = $1 WHERE id = 1`, int64(fence)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO log (fence) VALUES ($1)`, int64(fence))
		return err
	})
}

func value(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var v int64
	if err := db.QueryRow(`SELECT value FROM data WHERE id = 1`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func recorded(t testing.TB, db *sql.DB, resource string) int64 {
	t.Helper()
	var f int64
	err := db.QueryRow(`SELECT fence FROM dlm_fences WHERE resource = $1`, resource).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSQLCheck: a smaller fence is refused with ErrStale and its writes are
// rolled back; an equal fence (the same holder writing again) and larger
// ones are accepted.
func TestSQLCheck(t *testing.T) {
	db := setup(t)
	ctx := context.Background()
	steps := []struct {
		fence uint64
		stale bool
		value int64 // data's value after the step
	}{{5, false, 5}, {3, true, 5}, {5, false, 5}, {4, true, 5}, {9, false, 9}, {1, true, 9}}
	for _, s := range steps {
		err := write(ctx, db, "orders:42", s.fence)
		if s.stale != errors.Is(err, fencing.ErrStale) || (!s.stale && err != nil) {
			t.Fatalf("fence %d: err = %v, want stale %v", s.fence, err, s.stale)
		}
		if v := value(t, db); v != s.value {
			t.Fatalf("after fence %d: value %d, want %d", s.fence, v, s.value)
		}
	}
	if f := recorded(t, db, "orders:42"); f != 9 {
		t.Fatalf("recorded fence %d, want 9", f)
	}
	// A caller that ignores the error cannot commit: Check rolled tx back.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE data SET value = 2 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := (fencing.SQL{}).Check(ctx, tx, "orders:42", 2); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("Check(2) = %v, want ErrStale", err)
	}
	if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("Commit after a refused Check = %v, want sql.ErrTxDone", err)
	}
	if v := value(t, db); v != 9 {
		t.Fatalf("value %d after a refused transaction, want 9", v)
	}

	// Resources are independent.
	if err := write(ctx, db, "orders:43", 1); err != nil {
		t.Fatal(err)
	}
}

// waitBlocked polls until a backend waits on a lock (the second upsert
// queued behind the first transaction's row lock).
func waitBlocked(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no transaction waits on the fence row's lock after 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSQLConcurrentTransactions: two transactions fencing one resource at
// once, at READ COMMITTED (PostgreSQL's weakest level) and REPEATABLE READ.
// The second upsert waits for the first transaction and then judges the
// committed row: a smaller fence is refused after the larger commits, a
// larger one passes, and one behind a rolled-back transaction passes.
func TestSQLConcurrentTransactions(t *testing.T) {
	db := setup(t)
	cases := []struct {
		name          string
		level         sql.IsolationLevel
		first, second uint64
		commitFirst   bool
		secondOK      bool
	}{
		{"rc/smaller-after-commit", sql.LevelReadCommitted, 50, 30, true, false},
		{"rc/larger-after-commit", sql.LevelReadCommitted, 60, 70, true, true},
		{"rc/smaller-after-rollback", sql.LevelReadCommitted, 100, 80, false, true},
		{"rr/smaller-after-commit", sql.LevelRepeatableRead, 200, 150, true, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			res := "r" + string(rune('a'+i))
			opts := &sql.TxOptions{Isolation: c.level}
			tx1, err := db.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := (fencing.SQL{}).Check(ctx, tx1, res, c.first); err != nil {
				t.Fatal(err)
			}
			tx2, err := db.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.level == sql.LevelRepeatableRead {
				// Take the snapshot before tx1 commits.
				if _, err := tx2.ExecContext(ctx, `SELECT 1 FROM data`); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- (fencing.SQL{}).Check(ctx, tx2, res, c.second) }()
			waitBlocked(t, db)
			if c.commitFirst {
				err = tx1.Commit()
			} else {
				err = tx1.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			err = <-done
			if c.secondOK {
				if err != nil {
					t.Fatalf("second Check(%d) = %v, want nil", c.second, err)
				}
				if err := tx2.Commit(); err != nil {
					t.Fatal(err)
				}
				if f := recorded(t, db, res); f != int64(c.second) {
					t.Fatalf("recorded %d, want %d", f, c.second)
				}
				return
			}
			if err == nil {
				t.Fatalf("second Check(%d) passed after fence %d committed", c.second, c.first)
			}
			if c.level == sql.LevelReadCommitted && !errors.Is(err, fencing.ErrStale) {
				t.Fatalf("second Check = %v, want ErrStale", err)
			}
			t.Logf("refused: %v", err)
			if f := recorded(t, db, res); f != int64(c.first) {
				t.Fatalf("recorded %d, want %d", f, c.first)
			}
		})
	}
}

// TestSQLBadInput: bad arguments, a closed database and a transaction
// already ended give clear errors and write nothing.
func TestSQLBadInput(t *testing.T) {
	db, dsn := setupDSN(t)
	ctx := context.Background()
	huge := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		name     string
		resource string
		fence    uint64
		sqlOpts  fencing.SQL
	}{
		{"fence 0", "r", 0, fencing.SQL{}},
		{"1 MiB resource", huge, 1, fencing.SQL{}},
		{"empty resource", "", 1, fencing.SQL{}},
		{"NUL in resource", "a\x00b", 1, fencing.SQL{}},
		{"invalid UTF-8", "a\xffb", 1, fencing.SQL{}},
		{"fence above int64", "r", math.MaxInt64 + 1, fencing.SQL{}},
		{"bad table", "r", 1, fencing.SQL{Table: "x; DROP TABLE data"}},
	} {
		var err error
		if c.sqlOpts.Table != "" {
			err = c.sqlOpts.Update(ctx, db, c.resource, c.fence, nil)
		} else {
			err = write(ctx, db, c.resource, c.fence)
		}
		if !errors.Is(err, dlm.ErrInvalid) {
			t.Errorf("%s: err = %v, want dlm.ErrInvalid", c.name, err)
		}
		// Through Check too: tx is rolled back.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data SET value = 77 WHERE id = 1`); err != nil {
			t.Fatal(err)
		}
		if err := c.sqlOpts.Check(ctx, tx, c.resource, c.fence); !errors.Is(err, dlm.ErrInvalid) {
			t.Errorf("%s: Check = %v, want dlm.ErrInvalid", c.name, err)
		}
		if err := tx.Commit(); !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("%s: Commit after a refused Check = %v, want sql.ErrTxDone", c.name, err)
		}
	}
	if err := (fencing.SQL{}).Check(ctx, nil, "r", 1); !errors.Is(err, dlm.ErrInvalid) {
		t.Errorf("nil tx: %v", err)
	}

	// A transaction already rolled back.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if err := (fencing.SQL{}).Check(ctx, tx, "r", 1); !errors.Is(err, sql.ErrTxDone) {
		t.Errorf("rolled-back tx: %v, want sql.ErrTxDone", err)
	}

	// A closed database.
	other, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Ping(); err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	if err := write(ctx, other, "r", 1); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("closed database: %v", err)
	}
	if err := (fencing.SQL{}).Store(other).Advance(ctx, "r", 1); err == nil {
		t.Error("Advance on a closed database passed")
	}

	var n int
	if err := db.QueryRow(`SELECT count(*) FROM dlm_fences`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || value(t, db) != 0 {
		t.Fatalf("after bad input: %d fence rows, value %d; want nothing written", n, value(t, db))
	}
}

// TestSQLWriters: 64 writers with shuffled fences 1..64 on one resource at
// once, each a READ COMMITTED transaction that sets the value and appends
// its fence to a log. The committed sequence (log order, which is commit
// order: the fence row's lock serialises the transactions) must increase,
// every refused fence must be below a committed one, and the value must be
// 64's. The same check run over a read-then-write fence (naiveCheck, every
// writer reading before any writes) finds the violation.
func TestSQLWriters(t *testing.T) {
	db := setup(t)
	db.SetMaxOpenConns(80)
	committed, refused := runWriters(t, db, 64, nil)
	t.Logf("64 writers: %d committed, %d refused", len(committed), len(refused))
	if err := monotonic(committed, refused); err != nil {
		t.Fatal(err)
	}
	if committed[len(committed)-1] != 64 || value(t, db) != 64 {
		t.Fatalf("last committed %d, value %d; want 64's write", committed[len(committed)-1], value(t, db))
	}

	t.Run("naive read-then-write is caught", func(t *testing.T) {
		db := setup(t)
		db.SetMaxOpenConns(80)
		committed, refused := runWriters(t, db, 16, naiveCheck)
		if err := monotonic(committed, refused); err == nil {
			t.Fatalf("the check accepted a read-then-write fence: committed %v", committed)
		} else {
			t.Logf("caught: %v", err)
		}
	})
}

// naiveCheck is the racy check users write: read the fence, compare, then
// write it, in two statements. read is called between the two.
func naiveCheck(ctx context.Context, tx *sql.Tx, resource string, fence uint64, between func()) error {
	var cur int64
	err := tx.QueryRowContext(ctx, `SELECT fence FROM dlm_fences WHERE resource = $1`, resource).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	between()
	if cur > int64(fence) {
		_ = tx.Rollback()
		return fencing.ErrStale
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO dlm_fences VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence`, resource, int64(fence))
	return err
}

func runWriters(t *testing.T, db *sql.DB, n int, naive func(context.Context, *sql.Tx, string, uint64, func()) error) (committed, refused []int64) {
	t.Helper()
	ctx := context.Background()
	fences := rand.Perm(n)
	var read sync.WaitGroup // the naive writers all read before any writes
	read.Add(n)
	start := make(chan struct{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, f := range fences {
		fence := uint64(f + 1)
		wg.Go(func() {
			<-start
			var err error
			if naive == nil {
				err = write(ctx, db, "orders:42", fence)
			} else {
				err = func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if err := naive(ctx, tx, "orders:42", fence, func() { read.Done(); read.Wait() }); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, `UPDATE data SET value = $1 WHERE id = 1`, int64(fence)); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, `INSERT INTO log (fence) VALUES ($1)`, int64(fence)); err != nil {
						return err
					}
					return tx.Commit()
				}()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
			case errors.Is(err, fencing.ErrStale):
				refused = append(refused, int64(fence))
			default:
				t.Errorf("writer %d: %v", fence, err)
			}
		})
	}
	close(start)
	wg.Wait()
	rows, err := db.Query(`SELECT fence FROM log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var f int64
		if err := rows.Scan(&f); err != nil {
			t.Fatal(err)
		}
		committed = append(committed, f)
	}
	if len(committed)+len(refused) != n {
		t.Fatalf("%d committed + %d refused, want %d writes", len(committed), len(refused), n)
	}
	return committed, refused
}

// monotonic checks a run of fenced writes: the committed fences strictly
// increase in commit order, and every refused fence is below a committed
// one (it was refused for a reason).
func monotonic(committed, refused []int64) error {
	if len(committed) == 0 {
		return errors.New("nothing committed")
	}
	for i := 1; i < len(committed); i++ {
		if committed[i] <= committed[i-1] {
			return fmt.Errorf("commit %d has fence %d after fence %d", i, committed[i], committed[i-1])
		}
	}
	top := committed[len(committed)-1]
	for _, f := range refused {
		if f >= top {
			return errors.New("a fence at or above every committed one was refused")
		}
	}
	return nil
}

// TestMiddlewareSQL: the HTTP middleware over the PostgreSQL store refuses
// a smaller fence with 409 and admits equal and larger ones.
func TestMiddlewareSQL(t *testing.T) {
	db := setup(t)
	srv := httptest.NewServer(fencing.Middleware(fencing.SQL{}.Store(db), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(srv.Close)
	for _, s := range []struct {
		fence uint64
		code  int
	}{{4, 200}, {2, 409}, {4, 200}, {8, 200}, {7, 409}} {
		req, _ := http.NewRequest("PUT", srv.URL, nil)
		if err := fencing.SetHeader(req, "orders:42", s.fence); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != s.code {
			t.Fatalf("fence %d: %d, want %d", s.fence, resp.StatusCode, s.code)
		}
	}
	if f := recorded(t, db, "orders:42"); f != 8 {
		t.Fatalf("recorded %d, want 8", f)
	}
}
