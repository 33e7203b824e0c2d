package pgtest

import (
	"database/sql"
	"errors"
	"os"
	"testing"
)

// requireEnv turns a missing PostgreSQL from a skip into a failure, as it
// does for redis-server (internal/redistest).
const requireEnv = "DLM_REQUIRE_REDIS"

// startPostgres starts a PostgreSQL server of the test's own (Start),
// stopped by t.Cleanup, and returns an open database and its data source
// name. A missing PostgreSQL skips the test, unless DLM_REQUIRE_REDIS=1.
func startPostgres(t testing.TB) (*sql.DB, string) {
	t.Helper()
	s, err := Start()
	if errors.Is(err, ErrNoPostgres) || errors.Is(err, ErrNoUser) {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("%v; %s=1 requires it", err, requireEnv)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	db, err := s.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, s.DSN
}
