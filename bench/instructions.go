package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmgo/dlm/internal/redistest"
)

// Server instructions per lock+unlock pair, counted by valgrind's callgrind
// (-instructions): each one-node contender gets a fresh redis-server run
// under callgrind, makes pairs TryLock+Unlock pairs from goroutines
// goroutines on distinct keys, and the server's instructions during those
// pairs are divided by their number. Callgrind counts what the server
// executes in user space — not the kernel's work on its sockets, which the
// servers' used_cpu_sys reports in the distinct scenario — and counts the
// same for the same work whatever else the machine is doing. Under
// callgrind the server runs some fifty times slower, so calls queue up
// behind it: contenders that batch (dlm's coalescing, rueidis' pipelining)
// batch as on a saturated server.

// instrTimeout bounds one call to the slowed server.
const instrTimeout = 5 * time.Second

type instrResult struct {
	name  string
	perOp float64 // server instructions per pair
	err   error
}

// measureInstructions runs the measurement for every selected one-node
// contender and writes a Markdown table to w.
func measureInstructions(ctx context.Context, o Options, pairs, goroutines int, w, log io.Writer) error {
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("-instructions needs %s (apt-get install valgrind redis-server): %w", tool, err)
		}
	}
	if goroutines < 1 || pairs < goroutines {
		return fmt.Errorf("-instructions: %d pairs over %d goroutines", pairs, goroutines)
	}
	var results []instrResult
	for _, c := range contenders {
		if c.Nodes != 1 || (o.Only != nil && !o.Only.MatchString(c.Name)) || len(c.Scenarios) > 0 {
			continue
		}
		fmt.Fprintf(log, "%s: ", c.Name)
		perOp, err := instructionsOf(ctx, c, pairs, goroutines)
		if err != nil {
			fmt.Fprintln(log, err)
		} else {
			fmt.Fprintf(log, "%.0f instructions per pair\n", perOp)
		}
		results = append(results, instrResult{c.Name, perOp, err})
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	best := 0.0
	for _, r := range results {
		if r.err == nil && !strings.HasPrefix(r.name, "dlm") && (best == 0 || r.perOp < best) {
			best = r.perOp
		}
	}
	fmt.Fprintf(w, "## Server instructions per lock+unlock pair (callgrind)\n\n")
	fmt.Fprintf(w, "%d pairs from %d goroutines on distinct keys, one redis-server under valgrind's callgrind per contender; user-space instructions only. In parentheses: the ratio to the best peer.\n\n", pairs, goroutines)
	fmt.Fprintf(w, "| Contender | server instructions per pair ↓ |\n| --- | ---: |\n")
	var failed []string
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(w, "| %s | failed |\n", r.name)
			failed = append(failed, r.name+": "+r.err.Error())
			continue
		}
		ratio := ""
		if best > 0 {
			ratio = fmt.Sprintf(" (%.2f×)", r.perOp/best)
		}
		fmt.Fprintf(w, "| %s | %s%s |\n", r.name, num(r.perOp), ratio)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d measurements failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}

// instructionsOf measures one contender on a server of its own.
func instructionsOf(ctx context.Context, c Contender, pairs, goroutines int) (float64, error) {
	srv, err := startCallgrind()
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	l, err := c.New(Env{Addrs: []string{srv.addr}, TTL: time.Minute, NodeTimeout: instrTimeout,
		RetryMin: 5 * time.Millisecond, RetryMax: 250 * time.Millisecond, PoolSize: 128})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	// Warm up (scripts loaded, connections open), then count.
	if err := lockPairs(ctx, l, goroutines, goroutines); err != nil {
		return 0, err
	}
	if err := srv.control("-z"); err != nil {
		return 0, err
	}
	if err := lockPairs(ctx, l, pairs, goroutines); err != nil {
		return 0, err
	}
	if err := srv.control("-d"); err != nil {
		return 0, err
	}
	n, err := srv.dumped()
	if err != nil {
		return 0, err
	}
	return float64(n) / float64(pairs/goroutines*goroutines), nil
}

// lockPairs makes pairs TryLock+Unlock pairs (rounded down to a multiple of
// goroutines) from goroutines goroutines, each on a key of its own.
func lockPairs(ctx context.Context, l Locker, pairs, goroutines int) error {
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "instr:" + strconv.Itoa(g)
			for range pairs / goroutines {
				cctx, cancel := context.WithTimeout(ctx, instrTimeout)
				h, err := l.TryLock(cctx, key)
				if err == nil {
					err = h.Unlock(cctx)
				}
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// A callgrindServer is a redis-server run under callgrind.
type callgrindServer struct {
	srv  *redistest.Server
	dir  string
	addr string
}

func startCallgrind() (*callgrindServer, error) {
	dir, err := os.MkdirTemp("", "dlmbench-callgrind-")
	if err != nil {
		return nil, err
	}
	srv, err := redistest.Launch(redistest.Config{Dir: dir, Ready: 30 * time.Second,
		Command: func(name string, args ...string) *exec.Cmd {
			// The vgdb pipes callgrind_control talks through go in dir too:
			// in /tmp, a server killed at the end left three each run.
			cmd := exec.Command("valgrind", append([]string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "callgrind.out"),
				"--vgdb-prefix=" + filepath.Join(dir, "vgdb"), name}, args...)...)
			cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
			return cmd
		}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server under callgrind: %w", err)
	}
	return &callgrindServer{srv: srv, dir: dir, addr: srv.Addr}, nil
}

// control runs callgrind_control with flag ("-z" zeroes the counts, "-d"
// dumps them) on the server.
func (s *callgrindServer) control(flag string) error {
	out, err := exec.Command("callgrind_control", "--vgdb-prefix="+filepath.Join(s.dir, "vgdb"), flag, strconv.Itoa(s.srv.Pid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", flag, err, out)
	}
	return nil
}

// dumped returns the instruction count of the server's first dump (the
// "summary:" line of callgrind.out.1, written by control("-d")).
func (s *callgrindServer) dumped() (int64, error) {
	path := filepath.Join(s.dir, "callgrind.out.1")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		f, err := os.Open(path)
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
					f.Close()
					return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				}
			}
			f.Close()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no summary in %s", path)
		}
	}
}

func (s *callgrindServer) stop() {
	s.srv.Stop()
	os.RemoveAll(s.dir)
}
