package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlmgo/dlm"
)

// Exit codes of dlm run besides the command's own status.
const (
	exitNotLocked = 75 // EX_TEMPFAIL: the lock could not be taken
	exitLost      = 76 // the lock was lost while the command ran
)

// unlockTimeout bounds the release after COMMAND exits.
const unlockTimeout = 5 * time.Second

const runUsage = `usage: dlm run --key KEY [flags] -- COMMAND [ARGS...]

Takes the lock on KEY (waiting up to --wait), runs COMMAND while the lock is
renewed every TTL/3, and releases it when COMMAND exits. COMMAND's
environment gets:
  DLM_KEY    the lock's key
  DLM_FENCE  the fencing token, a number larger than that of any earlier
             holder of KEY: pass it to the storage COMMAND writes to, so it
             can refuse writes from a holder that lost the lock
Signals dlm receives (INT, TERM, HUP, QUIT, USR1, USR2) are forwarded to
COMMAND. When the lock is lost (a renewal is refused, or fails until the
lease runs out, or --max-hold passed) COMMAND is stopped as --on-lost says.

Exit status:
  COMMAND's own (128+N when signal N ended it)
  75  the lock could not be taken (held by another, or unreachable servers)
  76  the lock was lost while COMMAND ran (unless --on-lost ignore)
  2   usage or configuration error
  127 COMMAND could not be started

`

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage+targetUsage+"\nflags:\n"); fs.PrintDefaults() }
	tf := addTargetFlags(fs)
	key := fs.String("key", "", "lock key (required)")
	ttl := fs.Duration("ttl", 0, "lock TTL; renewed every TTL/3 (default: the config's ttl, else 10s)")
	wait := fs.Duration("wait", 0, "how long to wait for the lock; 0 makes one attempt")
	onLost := fs.String("on-lost", "term", "what to do with COMMAND when the lock is lost: term (SIGTERM, then SIGKILL after --grace), kill, or ignore")
	grace := fs.Duration("grace", 5*time.Second, "time between SIGTERM and SIGKILL when the lock is lost")
	maxHold := fs.Duration("max-hold", 0, "stop renewing after this long: the lease then runs out within one TTL and COMMAND is treated as having lost the lock (default: no bound)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	cmdArgs := fs.Args()
	switch {
	case *key == "":
		fmt.Fprintln(stderr, "dlm run: --key is required")
		return 2
	case len(cmdArgs) == 0:
		fmt.Fprintln(stderr, "dlm run: no command given (put it after --)")
		return 2
	case *onLost != "term" && *onLost != "kill" && *onLost != "ignore":
		fmt.Fprintf(stderr, "dlm run: --on-lost %q: want term, kill or ignore\n", *onLost)
		return 2
	case *wait < 0 || *ttl < 0 || *grace < 0 || *maxHold < 0:
		fmt.Fprintln(stderr, "dlm run: --wait, --ttl, --grace and --max-hold must not be negative")
		return 2
	}
	cfg, err := tf.load()
	if err != nil {
		fmt.Fprintln(stderr, "dlm run:", err)
		return 2
	}
	if *ttl == 0 {
		*ttl = time.Duration(cfg.TTL)
	}
	if *ttl == 0 {
		*ttl = dlm.DefaultTTL
	}
	t, err := connect(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "dlm run:", err)
		return 2
	}
	defer t.Close()
	// Without --max-hold renewal has no bound: COMMAND decides how long it runs.
	if *maxHold == 0 {
		*maxHold = math.MaxInt64
	}
	m, err := dlm.New(t.strat, dlm.WithTTL(*ttl), dlm.WithAutoRenew(1.0/3, *maxHold))
	if err != nil {
		fmt.Fprintln(stderr, "dlm run:", err)
		return 2
	}

	var lock *dlm.Lock
	if *wait == 0 {
		lock, err = m.TryLock(ctx, *key)
	} else {
		wctx, cancel := context.WithTimeout(ctx, *wait)
		lock, err = m.Lock(wctx, *key)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(stderr, "dlm run: could not lock %q: %v\n", *key, err)
		return exitNotLocked
	}
	defer func() {
		// Bounded: a server that stopped answering must not hold dlm up
		// after COMMAND has exited.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		_ = lock.Unlock(uctx)
	}()

	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "DLM_KEY="+*key, "DLM_FENCE="+strconv.FormatUint(lock.Fence(), 10))
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "dlm run: %v\n", err)
		return 127
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	lost := lock.Context().Done() // the Manager renews; this ends when it cannot
	wasLost := false
	var killAt <-chan time.Time
	for {
		select {
		case <-exited:
			if wasLost && *onLost != "ignore" {
				return exitLost
			}
			return exitStatus(cmd.ProcessState)
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-lost:
			lost = nil
			wasLost = true
			fmt.Fprintf(stderr, "dlm run: lost the lock on %q: %v\n", *key, context.Cause(lock.Context()))
			switch *onLost {
			case "term":
				_ = cmd.Process.Signal(syscall.SIGTERM)
				killAt = time.After(*grace)
			case "kill":
				_ = cmd.Process.Kill()
			}
		case <-killAt:
			_ = cmd.Process.Kill()
		}
	}
}

// exitStatus is the shell's view of how a process ended.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
