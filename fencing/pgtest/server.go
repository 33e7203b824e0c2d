package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/lib/pq" // the driver Server.Open uses
)

// ErrNoPostgres reports that initdb and postgres are not installed.
var ErrNoPostgres = errors.New("pgtest: postgres and initdb not found (install them, e.g. apt-get install postgresql)")

// ErrNoUser reports a root process with no postgres user to run PostgreSQL
// as (PostgreSQL refuses to run as root).
var ErrNoUser = errors.New("pgtest: running as root and no postgres user to run PostgreSQL as")

// Bin returns the directory holding initdb and postgres: Debian's
// /usr/lib/postgresql/<version>/bin, or PATH; ErrNoPostgres when neither
// has them.
func Bin() (string, error) {
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres"); len(m) > 0 {
		return filepath.Dir(m[len(m)-1]), nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoPostgres
}

// A Server is a PostgreSQL server of its own: a fresh data directory and
// a unix socket in a directory of its own, no TCP port.
type Server struct {
	// DSN is the lib/pq data source name of the server's postgres database
	// (user postgres, trust authentication).
	DSN string
	// Dir holds the socket, the data directory and postgres.log.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
}

// Start runs initdb into a fresh directory and starts postgres listening
// on a unix socket in it only, fsync off, and waits until it answers. As
// root it runs both as the postgres user. The server dies with the
// calling process however it ends (Pdeathsig); Close stops it and
// deletes its files.
func Start() (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	// In the system's temporary directory: a test's TempDir has parents
	// of mode 0700, closed to the postgres user.
	dir, err := os.MkdirTemp("", "dlm-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir}
	if err := s.start(bin, cred); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// credential returns, as root, the postgres user's credential to run
// PostgreSQL with (ErrNoUser without one); otherwise nil.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// start gives s.Dir to cred's user, runs initdb into it and starts postgres
// (with bin's programs), and waits until it answers.
func (s *Server) start(bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.Dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = s.Dir
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	data := filepath.Join(s.Dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	logf := filepath.Join(s.Dir, "postgres.log")
	logFile, err := os.Create(logf)
	if err != nil {
		return err
	}
	defer logFile.Close()
	s.cmd = command("postgres", "-D", data, "-k", s.Dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "max_connections=200", "-c", "shared_buffers=16MB")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fmt.Errorf("pgtest: postgres: %v", err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	s.DSN = fmt.Sprintf("host=%s port=5432 user=postgres dbname=postgres sslmode=disable", s.Dir)
	return s.waitReady(logf)
}

// waitReady pings the server until it answers, failing (with the end of
// its log, logf) if postgres exits or has not answered within 30s.
func (s *Server) waitReady(logf string) error {
	db, err := s.Open()
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(logf)
			return fmt.Errorf("pgtest: postgres exited: %s", tail(b))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf)
			return fmt.Errorf("pgtest: postgres not ready after 30s: %v\n%s", err, tail(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Open opens the server's database with lib/pq.
func (s *Server) Open() (*sql.DB, error) { return sql.Open("postgres", s.DSN) }

// Close stops the server (SIGQUIT: immediate shutdown, backends included;
// SIGKILL after 10s) and deletes its files.
func (s *Server) Close() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		s.cmd = nil
	}
	_ = os.RemoveAll(s.Dir)
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
