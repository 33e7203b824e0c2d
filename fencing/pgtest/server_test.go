package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq"
)

// requireEnv turns a missing PostgreSQL from a skip into a failure, as it
// does for redis-server (internal/redistest).
const requireEnv = "DLM_REQUIRE_REDIS"

// pgBin returns the directory holding initdb and postgres: Debian's
// /usr/lib/postgresql/<version>/bin, or PATH.
func pgBin(t testing.TB) string {
	t.Helper()
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres"); len(m) > 0 {
		return filepath.Dir(m[len(m)-1])
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p)
	}
	msg := "postgres and initdb not found (install them, e.g. apt-get install postgresql)"
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s; %s=1 requires them", msg, requireEnv)
	}
	t.Skip(msg)
	return ""
}

// startPostgres starts a PostgreSQL server of the test's own: initdb into
// a fresh directory, postgres listening on a unix socket in it only (no
// port to collide on), fsync off. As root it runs both as the postgres
// user (PostgreSQL refuses to run as root). The server dies with the test
// process however it ends (Pdeathsig) and is stopped by t.Cleanup. It
// returns an open database and its data source name.
func startPostgres(t testing.TB) (*sql.DB, string) {
	t.Helper()
	bin := pgBin(t)
	// Not t.TempDir: its parents are 0700, closed to the postgres user.
	dir, err := os.MkdirTemp("", "dlm-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	logf := filepath.Join(dir, "postgres.log")
	logFile, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := command("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "max_connections=200", "-c", "shared_buffers=16MB")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// SIGQUIT: immediate shutdown, backends included.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	dsn := fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres sslmode=disable", dir)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return db, dsn
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf)
			t.Fatalf("postgres exited: %s", tail(b))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf)
			t.Fatalf("postgres not ready after 30s: %v\n%s", err, tail(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
