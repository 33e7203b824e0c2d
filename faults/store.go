package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/fencing"
	"github.com/dlmgo/dlm/fencing/pgtest"
	"github.com/dlmgo/dlm/internal/redistest"
)

// Registers lists the stores a register can keep its fences and data in
// (Cell.Register): "" the register's own map, "postgres" a PostgreSQL
// table written through fencing.SQL, "redis" a Redis key written through
// fencing.Redis.
func Registers() []string { return []string{"", "postgres", "redis"} }

// A store decides the register's writes when Cell.Register names one: it
// writes the client's data for key under fence, atomically with the fence
// check, and reports whether it accepted the write (false: a larger fence
// was recorded first). An error leaves the outcome unknown.
type store interface {
	write(ctx context.Context, key string, fence uint64, client, op, n int) (accepted bool, err error)
	// bind returns the context of a write of the client's request req:
	// req itself when giving up ends the write without writing.
	bind(req context.Context) context.Context
	close()
}

// unfencedStore is the bug Cell.Plant "unfenced-store" plants in the
// register: its store writes without the fence check, accepting every
// write, as a service that never passed the fence to its store.
const unfencedStore = "unfenced-store"

// openStore starts the store named register for a run (files in dir, a
// host of n for a server of its own), the fence check left out when
// unfenced.
func openStore(register string, n *Net, dir string, unfenced bool) (store, error) {
	switch register {
	case "postgres":
		return openPostgres(unfenced)
	case "redis":
		return openRedis(n, dir, unfenced)
	}
	return nil, fmt.Errorf("faults: unknown register %q", register)
}

// pgStore keeps the register in PostgreSQL: the fence in fencing's table,
// the data in table register (one row per key: the fence, client, attempt
// and write number of the last write), both in one transaction that
// fencing.SQL.Update fences, at READ COMMITTED.
type pgStore struct {
	srv      *pgtest.Server
	db       *sql.DB
	unfenced bool
}

const registerUpsert = `INSERT INTO register (key, fence, client, op, n) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, client = EXCLUDED.client, op = EXCLUDED.op, n = EXCLUDED.n`

func openPostgres(unfenced bool) (store, error) {
	srv, err := pgtest.Start()
	if err != nil {
		return nil, err
	}
	db, err := srv.Open()
	if err != nil {
		srv.Close()
		return nil, err
	}
	db.SetMaxIdleConns(32)
	s := &pgStore{srv: srv, db: db, unfenced: unfenced}
	ctx := context.Background()
	if err := (fencing.SQL{}).CreateTable(ctx, db); err != nil {
		s.close()
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE register (key TEXT PRIMARY KEY, fence BIGINT NOT NULL, client INT NOT NULL, op INT NOT NULL, n INT NOT NULL)`); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *pgStore) write(ctx context.Context, key string, fence uint64, client, op, n int) (bool, error) {
	if s.unfenced {
		_, err := s.db.ExecContext(ctx, registerUpsert, key, int64(fence), client, op, n)
		return err == nil, err
	}
	err := (fencing.SQL{}).Update(ctx, s.db, key, fence, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, registerUpsert, key, int64(fence), client, op, n)
		return err
	})
	if errors.Is(err, fencing.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// bind: a transaction given up before its commit is rolled back
// (database/sql), so the write ends with the request.
func (s *pgStore) bind(req context.Context) context.Context { return req }

func (s *pgStore) close() {
	_ = s.db.Close()
	s.srv.Close()
}

// redisStore keeps the register in a redis-server of its own (a host of
// the run's network that no nemesis touches): fencing.Redis.Set writes the
// key "register:<key>" and checks the fence in one script, over a dlm
// Node of go-redis.
type redisStore struct {
	srv      *server
	c        *redis.Client
	fenced   fencing.Redis
	unfenced bool
}

func openRedis(n *Net, dir string, unfenced bool) (store, error) {
	h, err := n.AddHost("store")
	if err != nil {
		return nil, err
	}
	d := filepath.Join(dir, "store")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, err
	}
	srv := &server{host: h, port: 6379, dir: d, cfg: redistest.Config{
		Bin: "redis-server", Dir: d, Host: h.IP, Ports: []int{6379}, Command: h.Command,
	}}
	if err := srv.start(); err != nil {
		srv.kill()
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), PoolSize: 32})
	return &redisStore{srv: srv, c: c, fenced: fencing.Redis{Node: goredis.New(c)}, unfenced: unfenced}, nil
}

func (s *redisStore) write(ctx context.Context, key string, fence uint64, client, op, n int) (bool, error) {
	value := fmt.Sprintf("%d %d %d %d", fence, client, op, n)
	if s.unfenced {
		err := s.c.Set(ctx, "register:"+key, value, 0).Err()
		return err == nil, err
	}
	err := s.fenced.Set(ctx, key, fence, "register:"+key, value, 0)
	if errors.Is(err, fencing.ErrStale) {
		return false, nil
	}
	return err == nil, err
}

// bind: a script once sent runs whether or not its caller waits, so the
// write is not bound to the request and its outcome is always heard.
func (s *redisStore) bind(context.Context) context.Context { return context.Background() }

func (s *redisStore) close() {
	_ = s.c.Close()
	s.srv.kill()
}

// storeWrite is what the register does with a write when a store decides.
// The write is bound to the client's request, which the client binds to
// its lease, as a service passes lock.Context() to its store: a write the
// client gave up on (its lease ended) before it reached the store is not
// sent, and a PostgreSQL transaction is rolled back when it is given up
// before its commit (RegCancel: not written). A Redis script once sent
// runs to its end, its outcome recorded. The decision is recorded when the
// store answered, so that an accepted write's event is never earlier than
// the store's commit.
func (r *register) storeWrite(req context.Context, k string, f uint64, c, op, n int) (Event, error) {
	e := Event{Client: c, Op: op, N: n, Fence: f, Key: k, Kind: RegAccept}
	var accepted bool
	err := req.Err()
	if err == nil {
		ctx, cancel := context.WithTimeout(r.store.bind(req), storeTimeout)
		accepted, err = r.store.write(ctx, k, f, c, op, n)
		cancel()
	}
	switch {
	case err != nil && req.Err() != nil:
		e.Kind, e.Info = RegCancel, err.Error()
	case err != nil:
		e.Kind, e.Info = RegError, err.Error()
	case !accepted:
		e.Kind = RegRefuse
	}
	r.mu.Lock()
	e.T = now()
	r.events = append(r.events, e)
	r.mu.Unlock()
	return e, err
}

// storeTimeout bounds a store's write.
const storeTimeout = 5 * time.Second
