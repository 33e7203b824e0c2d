package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/rwlock"
	"github.com/dlmgo/dlm/semaphore"
)

// Exit codes of dlm run besides the command's own status.
const (
	exitNotLocked   = 75  // EX_TEMPFAIL: the lock could not be taken
	exitLost        = 76  // the lock was lost while the command ran
	exitInterrupted = 130 // interrupted (SIGINT) while waiting for the lock (see interrupted)
)

// unlockTimeout bounds the release after COMMAND exits.
const unlockTimeout = 5 * time.Second

const runUsage = `usage: dlm run --key KEY [flags] -- COMMAND [ARGS...]

Takes the lock on KEY (waiting up to --wait), runs COMMAND while the lock is
renewed every second (every TTL/3 for a TTL below 3s), and releases it when
COMMAND exits (the release is given 5s). The TTL is 30s unless --ttl or the
configuration says otherwise. COMMAND's environment gets:
  DLM_KEY    the lock's key
  DLM_FENCE  the fencing token, a number larger than that of any earlier
             holder of KEY: pass it to the storage COMMAND writes to, so it
             can refuse writes from a holder that lost the lock

Shared holds (every user of KEY must give the same N; a different N than
that of KEY's other users is refused, exit status 2):
  --permits N           KEY is a semaphore of N permits: take one of them
                        (DLM_FENCE is the permit's fence)
  --readers N           KEY is a read-write lock admitting N readers: take
                        its write side (alone), or with --shared a read side
                        (DLM_FENCE is then the fence of the last writer's
                        gate the reader passed)

COMMAND runs in a process group of its own. No process of that group runs
after the lease's validity ends: when the lock is lost (a renewal is
refused, renewals fail, or --max-hold passed) the group gets SIGTERM, and
SIGKILL after --grace; in any case SIGTERM comes once less than --grace of
the lease is left (--grace is capped at a third of the TTL) and SIGKILL
just before it ends. If dlm itself dies, even by SIGKILL, the group is
killed at once; if its supervisor process dies, dlm kills the group
before releasing the lock. A watchdog process (dlm __watch, in a process
group of its own) holds the validity of each renewal: if dlm cannot act at
the lease's end (stopped by SIGSTOP, Ctrl-Z, a debugger), or dlm and its
supervisor die at once, the watchdog kills the group. When COMMAND exits,
what it left running in its group is killed, and confirmed gone, before
the lock is released.

Processes COMMAND starts outside its group (setsid, setpgid, a double
fork) are followed while they stay below dlm, which adopts them as a child
subreaper: they are killed and reaped before the lock is released, and at
the lease's end with the group; one that cannot be killed keeps the lock
unreleased (it runs out within its TTL) and is named. Not followed: a
process re-parented outside dlm's tree (started by a service manager, or
adopted by init because dlm itself was killed). --on-lost ignore lets the
group run on after a loss (and past the lease): the rule no longer holds.

Once per schedule: --hold-at-least D keeps the lock, unrenewed, until D
after it was granted (counted from when dlm received the grant) when
COMMAND ends sooner, then leaves it to expire; other runs meanwhile exit 75
(with --wait 0). It applies whatever COMMAND's status, once COMMAND was
started; dlm exits as soon as COMMAND has: the servers keep the key (its
TTL set once to the time left). D must not be negative, nor above 24h,
the config's max_ttl or --max-hold.

Bounds: --wait 0 (the default) makes one attempt, given at most 1s, or
three node timeouts (the config's timeout) when that is longer; --wait D
waits up to D. dlm elect's --wait means the same.

Signals: while waiting for the lock, SIGINT, SIGTERM and SIGHUP end the
wait; dlm takes nothing and exits 128+N. While COMMAND runs, the signals
dlm receives (INT, TERM, HUP, QUIT, USR1, USR2) are forwarded to its group;
dlm releases the lock once COMMAND exits and exits with COMMAND's status.

Failover: while the lock's node is down renewals are retried, and COMMAND
runs on as long as the lease allows. It survives an outage (a failover,
until the client reaches the new primary) of up to about
TTL − 1s − grace − TTL/100: 23s with the defaults, enough for a Redis
Cluster at its default cluster-node-timeout (15s); a Sentinel at its
default down-after-milliseconds (30s) needs --ttl 45s. dlm doctor compares
the deployment's settings with the TTL (docs/failover-time.md).

Exit status:
  COMMAND's own (128+N when signal N ended it)
  75  the lock could not be taken (held by another, or unreachable servers)
  76  the lock was lost while COMMAND ran (unless --on-lost ignore)
  128+N signal N ended the wait for the lock (130 SIGINT, 129 SIGHUP,
        143 SIGTERM)
  2   usage or configuration error, including a TTL below 300ms and a
      --permits or --readers count other than that of KEY's other users
  127 COMMAND could not be started
`

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage+targetUsage(defaultURL)+"\nflags:\n"); fs.PrintDefaults() }
	tf := addTargetFlags(fs, defaultURL)
	key := fs.String("key", "", "lock key (required)")
	ttl := fs.Duration("ttl", 0, "lock TTL; renewed every second, or every TTL/3 below 3s (default: the config's ttl, else 30s)")
	wait := fs.Duration("wait", 0, "how long to wait for the lock; 0 makes one attempt (at most 1s, or three node timeouts)")
	onLost := fs.String("on-lost", "term", "what to do with COMMAND when the lock is lost: term (SIGTERM, then SIGKILL after --grace), kill, or ignore")
	grace := fs.Duration("grace", defaultGrace, "time between SIGTERM and SIGKILL when the lock is lost")
	maxHold := fs.Duration("max-hold", 0, "stop renewing after this long: the lease then runs out within one TTL and COMMAND is treated as having lost the lock (default: the config's max_hold, else no bound)")
	permits := fs.Int("permits", 0, "KEY is a semaphore of this many permits: take one")
	readers := fs.Int("readers", 0, "KEY is a read-write lock admitting this many readers: take its write side, or with --shared a read side")
	shared := fs.Bool("shared", false, "with --readers: take a read side")
	holdAtLeast := fs.Duration("hold-at-least", 0, "when COMMAND ends sooner, keep the lock (unrenewed) until this long after it was granted, then let it expire")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	switch {
	case *key == "":
		fmt.Fprintln(stderr, "dlm run: --key is required")
		return 2
	case *permits < 0 || *readers < 0 || *permits > 0 && *readers > 0 || zeroGiven(fs, "permits", "readers"):
		fmt.Fprintln(stderr, "dlm run: --permits and --readers take a positive count, and not both")
		return 2
	case *shared && *readers == 0:
		fmt.Fprintln(stderr, "dlm run: --shared needs --readers N")
		return 2
	}
	o := holdOptions{name: "dlm run", what: strconv.Quote(*key), onLost: *onLost, wait: *wait, ttl: *ttl, grace: *grace, maxHold: *maxHold, holdAtLeast: *holdAtLeast}
	return runWhileHeld(ctx, tf, o, fs.Args(), stdout, stderr, func(ctx context.Context, m *dlm.Manager) (held, error) {
		switch {
		case *permits > 0:
			sem, err := semaphore.New(m, *key, *permits)
			if err != nil {
				return nil, err
			}
			if *wait == 0 {
				return sem.TryAcquire(ctx)
			}
			return sem.Acquire(ctx)
		case *readers > 0:
			rw, err := rwlock.New(m, *key, *readers)
			if err != nil {
				return nil, err
			}
			if *wait == 0 {
				// One short attempt: a hold of several locks has no single try.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, oneAttempt)
				defer cancel()
			}
			if *shared {
				return rw.RLock(ctx)
			}
			return rw.Lock(ctx)
		case *wait == 0:
			return m.TryLock(ctx, *key)
		}
		return m.Lock(ctx, *key)
	}, func(h held) []string {
		return []string{"DLM_KEY=" + *key, "DLM_FENCE=" + strconv.FormatUint(h.Fence(), 10)}
	})
}

// oneAttempt bounds what --wait 0 allows a read-write lock, whose holds are
// made of several locks.
const oneAttempt = time.Second

// A held is what dlm run and dlm elect keep while COMMAND runs: a lock, a
// permit, a read or write hold, a leadership.
type held interface {
	Context() context.Context
	Until() time.Time
	Fence() uint64
	Unlock(ctx context.Context) error
}

// holdOptions are the flags dlm run and dlm elect share.
type holdOptions struct {
	name                      string // "dlm run", for messages
	what                      string // what is held, for messages
	onLost                    string
	wait, ttl, grace, maxHold time.Duration
	holdAtLeast               time.Duration // dlm run's --hold-at-least
}

// runWhileHeld takes a hold with take (ctx bounded by --wait when it is
// positive), runs COMMAND while the hold is renewed, stops COMMAND as
// watchLease says, and releases the hold when COMMAND exits.
func runWhileHeld(ctx context.Context, tf targetFlags, o holdOptions, cmdArgs []string, stdout, stderr io.Writer,
	take func(context.Context, *dlm.Manager) (held, error), env func(held) []string) int {
	switch {
	case len(cmdArgs) == 0:
		fmt.Fprintf(stderr, "%s: no command given (put it after --)\n", o.name)
		return 2
	case o.onLost != "term" && o.onLost != "kill" && o.onLost != "ignore":
		fmt.Fprintf(stderr, "%s: --on-lost %s: want term, kill or ignore\n", o.name, quoteInput(o.onLost))
		return 2
	case o.wait < 0 || o.ttl < 0 || o.grace < 0 || o.maxHold < 0:
		fmt.Fprintf(stderr, "%s: --wait, --ttl, --grace and --max-hold must not be negative\n", o.name)
		return 2
	}
	ttl, grace, maxHold := &o.ttl, &o.grace, &o.maxHold
	cfg, err := tf.load()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", o.name, err)
		return 2
	}
	if *ttl == 0 {
		*ttl = time.Duration(cfg.TTL)
	}
	if *ttl == 0 {
		*ttl = runDefaultTTL
	}
	if *ttl < minRunTTL {
		fmt.Fprintf(stderr, "%s: TTL %v is too short: COMMAND must be stopped within the lease; use at least %v\n", o.name, *ttl, minRunTTL)
		return 2
	}
	// SIGTERM comes at the latest when a third of the lease is left.
	*grace = runGrace(*ttl, *grace)
	if *maxHold == 0 {
		*maxHold = time.Duration(cfg.MaxHold)
	}
	// Without a maximum hold renewal has no bound: COMMAND decides how long it runs.
	if *maxHold == 0 {
		*maxHold = math.MaxInt64
	}
	if d := o.holdAtLeast; d < 0 || d > dlm.MaxTTL || cfg.MaxTTL > 0 && d > time.Duration(cfg.MaxTTL) || d > *maxHold {
		fmt.Fprintf(stderr, "%s: --hold-at-least %v: must not be negative, nor above %v, the config's max_ttl or --max-hold\n", o.name, d, dlm.MaxTTL)
		return 2
	}
	m, closer, err := tf.open(ctx, cfg, dlm.WithTTL(*ttl), dlm.WithAutoRenew(renewFraction(*ttl), *maxHold), dlm.WithOwner(runOwner(o.name, cmdArgs[0])))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", o.name, err)
		return 2
	}
	defer closer.Close()

	wctx, cancel := context.WithTimeout(ctx, cmp.Or(o.wait, attemptBound(cfg))) // --wait 0: one attempt
	lock, err := take(wctx, m)
	cancel()
	granted := time.Now() // --hold-at-least counts from here
	switch {
	case err == nil:
	case errors.Is(err, dlm.ErrInvalid), errors.Is(err, semaphore.ErrMismatch):
		fmt.Fprintf(stderr, "%s: %v%s\n", o.name, err, dbHint(cfg.DB, err))
		return 2
	case ctx.Err() != nil:
		code, sig := interrupted(ctx)
		fmt.Fprintf(stderr, "%s: interrupted by %s while waiting for %s: nothing was taken\n", o.name, sig, o.what)
		return code
	default:
		fmt.Fprintf(stderr, "%s: could not lock %s: %v%s\n", o.name, o.what, err, clusterHint(cfg, err))
		return exitNotLocked
	}
	code, started, release := runCommand(lock, o, cmdArgs, env(lock), stdout, stderr)
	if release {
		// Bounded: a server that stopped answering must not hold dlm up
		// after COMMAND has exited.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		unlock := lock.Unlock
		if h, ok := lock.(interface {
			UnlockAt(context.Context, time.Time) error
		}); ok && o.holdAtLeast > 0 && started {
			// Kept from others until then; an Unlock once that has passed.
			unlock = func(ctx context.Context) error { return h.UnlockAt(ctx, granted.Add(o.holdAtLeast)) }
		}
		if err := unlock(uctx); err != nil && !errors.Is(err, dlm.ErrNotHeld) {
			fmt.Fprintf(stderr, "%s: unlock %s: %v (the lease runs out within its TTL)\n", o.name, o.what, err)
		}
	}
	return code
}

// runCommand runs argv under a supervisor while lock is held, stops it as
// watchLease says, and returns its exit status once nothing of it runs, and
// whether it was started. release is false when dlm could not confirm that
// nothing of it runs: the lock must then be left to run out.
func runCommand(lock held, o holdOptions, argv, env []string, stdout, stderr io.Writer) (code int, started, release bool) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := becomeSubreaper(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", o.name, err)
		return 127, false, true
	}
	first := int64(noDeadline)
	if o.onLost != "ignore" {
		first = monoDeadline(lock.Until())
	}
	s, err := startSupervised(argv, append(os.Environ(), env...), os.Stdin, stdout, stderr, first)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", o.name, err)
		return 127, false, true
	}
	defer s.conn.Close()
	g := &commandGroup{supervised: s, reaper: &reaper{pgid: s.pgid}, exited: make(chan struct{})}
	stopReaping := make(chan struct{})
	go g.reaper.reapUntil(stopReaping)
	defer close(stopReaping)
	go func() { _ = s.sup.Wait(); close(g.exited) }()
	code = watchLease(lock, o.onLost, o.grace, g, sigs, func(cause error) {
		fmt.Fprintf(stderr, "%s: lost the lock on %s: %v\n", o.name, o.what, cause)
	})
	// However the supervisor ended (COMMAND's exit, SIGKILL, the OOM
	// killer), nothing of COMMAND may run once the lock is released.
	if ws, ok := s.sup.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && !g.endedStopped {
		fmt.Fprintf(stderr, "%s: COMMAND's supervisor was killed (%v): stopping COMMAND's process group\n", o.name, ws.Signal())
	}
	if err := stopGroup(s.pgid, g.reaper, lock.Until); err != nil {
		fmt.Fprintf(stderr, "%s: %v: %s not released, its lease runs out within its TTL\n", o.name, err, o.what)
		return code, true, false
	}
	if err := stopAdopted(lock.Until); err != nil {
		fmt.Fprintf(stderr, "%s: %v: %s not released, its lease runs out within its TTL\n", o.name, err, o.what)
		return code, true, false
	}
	return code, true, true
}

// minRunTTL is the shortest TTL dlm run takes: renewal comes every TTL/3 there,
// and the group must be stoppable within what is left of a lease.
const minRunTTL = 300 * time.Millisecond

// stopMargin is how long before the lease's validity ends COMMAND's group
// is killed at the latest.
const stopMargin = 50 * time.Millisecond

// watchLease runs until COMMAND's supervisor exits, forwarding signals to
// COMMAND's group and stopping the group as onLost says: when the lock is
// lost, and in any case so that no process of the group runs after the
// lease's validity ends — SIGTERM once less than grace+stopMargin of it is
// left, SIGKILL at stopMargin. It tells the watchdog each validity a
// renewal confirms, and kills a stopped supervisor whose COMMAND has ended.
func watchLease(lock held, onLost string, grace time.Duration, g *commandGroup, sigs <-chan os.Signal, reportLost func(error)) int {
	lost := lock.Context().Done() // the Manager renews; this ends when it cannot
	wasLost, killed := false, false
	var termed, killedAt, checked time.Time // when SIGTERM and SIGKILL were sent, when the supervisor was checked
	confirmed := lock.Until()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-g.exited:
			// Stopped by dlm because the lease was ending counts as lost,
			// and so does an end by the watchdog.
			if onLost != "ignore" && !wasLost {
				if why := watchdogEnded(time.Now(), lock.Until(), confirmed, g.status()); why != "" {
					wasLost = true
					reportLost(errors.New(why))
				}
			}
			if (wasLost || killed || !termed.IsZero()) && onLost != "ignore" {
				return exitLost
			}
			return g.status()
		case s := <-sigs:
			signalGroup(g.conn, s.(syscall.Signal))
			continue
		case <-lost:
			lost = nil
			wasLost = true
			reportLost(context.Cause(lock.Context()))
		case <-tick.C:
		}
		if until := lock.Until(); onLost != "ignore" && !wasLost && until.After(confirmed) {
			confirmed = until
			_ = writeDeadline(g.conn.watch, monoDeadline(until))
		}
		if time.Since(checked) >= time.Second {
			checked = time.Now()
			g.killIfEndedStopped()
		}
		if killed && !killedAt.IsZero() && time.Since(killedAt) >= time.Second {
			g.kill(true)
			killedAt = time.Time{}
		}
		if onLost == "ignore" || killed {
			continue
		}
		left := time.Until(lock.Until())
		if !wasLost && left <= grace+stopMargin {
			wasLost, lost = true, nil
			reportLost(fmt.Errorf("its lease ends in %v and no renewal extended it (renewals failing, or --max-hold reached)", left.Round(time.Millisecond)))
		}
		switch {
		case left <= stopMargin || wasLost && onLost == "kill" || !termed.IsZero() && time.Since(termed) >= grace:
			signalGroup(g.conn, syscall.SIGKILL)
			g.kill(false)
			killed, killedAt = true, time.Now()
		case termed.IsZero() && (left <= grace+stopMargin || wasLost):
			signalGroup(g.conn, syscall.SIGTERM)
			termed = time.Now()
		}
	}
}

// watchdogEnded says why COMMAND, which ended with status at now, was
// stopped by the watchdog, or returns "" when it ended by itself. The
// watchdog acts once the validity dlm last wrote to it (confirmed) has
// passed: after the lease's end (until) when dlm was stopped, or before it
// when dlm, on a loaded machine, passed a renewal on too late; its
// SIGKILL then tells its act from COMMAND's own end.
func watchdogEnded(now, until, confirmed time.Time, status int) string {
	switch {
	case !now.Before(until.Add(-stopMargin)):
		return "its lease ended while dlm could not renew it (stopped?): the watchdog stopped COMMAND"
	case !now.Before(confirmed.Add(-stopMargin)) && status == 128+int(syscall.SIGKILL):
		return "dlm passed a renewal on to the watchdog too late (a loaded machine?): the watchdog stopped COMMAND at the validity it knew"
	}
	return ""
}

// A commandGroup is COMMAND under its supervisor, as dlm run drives it.
type commandGroup struct {
	*supervised
	reaper       *reaper
	exited       chan struct{} // closed once the supervisor has exited and been waited for
	endedStopped bool          // COMMAND ended while the supervisor was stopped: dlm killed the supervisor
}

// kill sends SIGKILL to COMMAND's group and to every process below dlm but
// the supervisor and the watchdog, in case the supervisor cannot act (stopped); supToo
// kills the supervisor as well.
func (g *commandGroup) kill(supToo bool) {
	_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
	killTree(os.Getpid(), g.sup.Process.Pid, g.watchdog)
	if supToo {
		_ = g.sup.Process.Kill()
	}
}

// killIfEndedStopped kills the supervisor when it is stopped and nothing of
// COMMAND's group runs: COMMAND has ended, and the
// supervisor, which would report it, cannot.
func (g *commandGroup) killIfEndedStopped() {
	if g.endedStopped || !stopped(g.sup.Process.Pid) || groupRuns(g.pgid) {
		return
	}
	g.endedStopped = true
	_ = g.sup.Process.Kill()
}

// status is COMMAND's exit status, as the supervisor reported it; when dlm
// killed a stopped supervisor, as dlm reaped COMMAND (re-parented to dlm).
func (g *commandGroup) status() int {
	if !g.endedStopped {
		return exitStatus(g.sup.ProcessState)
	}
	for end := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		g.reaper.reap()
		if ws, ok := g.reaper.leaderStatus(); ok {
			return waitStatus(ws)
		}
		if time.Now().After(end) {
			return exitLost // COMMAND's status is not to be had
		}
	}
}

// exitStatus is the shell's view of how a process ended.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return waitStatus(ws)
	}
	return ps.ExitCode()
}

// waitStatus is the shell's view of a wait status.
func waitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// runOwner names a dlm run or dlm elect process for dlm ls and inspect:
// "dlm run COMMAND@HOST:PID", with COMMAND's base name (dlm.FitOwner).
func runOwner(name, command string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return dlm.FitOwner(fmt.Sprintf("%s %s@%s:%d", name, filepath.Base(command), host, os.Getpid()))
}
