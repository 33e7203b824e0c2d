package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/fencing"
	"github.com/dlmgo/dlm/strategy"
)

// A write to PostgreSQL under a lock: the fence check is one statement of
// the transaction that writes. (Compiled, not run: it needs a database,
// opened with a driver such as github.com/lib/pq or pgx's stdlib.)
func ExampleSQL() {
	var db *sql.DB // sql.Open("postgres", dsn)
	var lock *dlm.Lock
	ctx := lock.Context()

	// Once, as a migration: fencing.Schema.
	if err := (fencing.SQL{}).CreateTable(ctx, db); err != nil {
		panic(err)
	}
	err := fencing.SQL{}.Update(ctx, db, lock.Key(), lock.Fence(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, 42)
		return err
	})
	if errors.Is(err, fencing.ErrStale) {
		// The lock was lost and another holder wrote with a larger fence:
		// nothing of this transaction was committed.
		fmt.Println("stale:", err)
	}

	// Or inside a transaction of your own:
	tx, _ := db.BeginTx(ctx, nil)
	if err := (fencing.SQL{}).Check(ctx, tx, lock.Key(), lock.Fence()); err != nil {
		return // tx was rolled back
	}
	// … the writes …
	_ = tx.Commit()
}

// Data kept in Redis, written under a lock's fence.
func ExampleRedis() {
	srv := dlmtest.NewServer() // an in-process Redis for the example
	defer srv.Close()
	node := srv.Node() // a program passes its own, e.g. goredis.New(client)
	single, _ := strategy.NewSingle(node)
	m, _ := dlm.New(single, dlm.WithTTL(10*time.Second))
	ctx := context.Background()

	lock, err := m.Lock(ctx, "orders:42")
	if err != nil {
		panic(err)
	}
	store := fencing.Redis{Node: node}
	err = store.Set(ctx, lock.Key(), lock.Fence(), "orders:42:status", "paid", 0)
	fmt.Println("write with fence", lock.Fence(), "->", err)

	// A holder whose lease ran out while it paused wakes up after another
	// took the lock and wrote: its late write is refused.
	_ = lock.Unlock(ctx)
	next, _ := m.Lock(ctx, "orders:42")
	_ = store.Set(ctx, next.Key(), next.Fence(), "orders:42:status", "shipped", 0)
	err = store.Set(ctx, lock.Key(), lock.Fence(), "orders:42:status", "refunded", 0)
	fmt.Println("late write with fence", lock.Fence(), "-> stale:", errors.Is(err, fencing.ErrStale))
	status, _ := srv.Do("GET", "orders:42:status")
	fmt.Println(status)
	// Output:
	// write with fence 1 -> <nil>
	// late write with fence 1 -> stale: true
	// shipped
}

// A service that refuses requests from a holder whose fence is stale, and a
// client that sends its lock's fence with every request.
func ExampleMiddleware() {
	srv := dlmtest.NewServer() // an in-process Redis; a service uses its own client
	defer srv.Close()

	api := httptest.NewServer(fencing.Middleware(fencing.Redis{Node: srv.Node()},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, fence, _ := fencing.FromContext(r.Context())
			fmt.Fprintf(w, "accepted %s at fence %d", key, fence)
		})))
	defer api.Close()

	for _, fence := range []uint64{7, 5} {
		req, _ := http.NewRequest("POST", api.URL, nil)
		_ = fencing.SetHeader(req, "orders:42", fence) // or &fencing.Transport{Lock: lock}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(fence, resp.Status)
	}
	// Output:
	// 7 200 OK
	// 5 409 Conflict
}
