package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// How dlm run keeps the rule that no process of COMMAND's process group runs
// after the lease's validity ends, even when dlm itself is killed:
//
// dlm run does not start COMMAND itself but a supervisor, the dlm binary
// again with superviseArg, joined to dlm by a socket pair (the supervisor's
// file descriptor 3). The supervisor starts COMMAND in a process group of its
// own, writes the group's id to the socket, and then sends every signal
// number dlm writes to the socket to the whole group. When the socket
// reaches end of file, dlm has exited or was killed (its end closes with it,
// SIGKILL included): the supervisor kills the group at once, and again until
// none of it is left. When COMMAND exits, the supervisor kills what it left
// running in its group and exits with COMMAND's status.
//
// The supervisor itself may die (SIGKILL, the OOM killer). COMMAND's leader
// gets SIGKILL when it does (PR_SET_PDEATHSIG), and dlm is a child
// subreaper (PR_SET_CHILD_SUBREAPER): every process of the group orphaned by
// the supervisor's or the leader's death becomes dlm's child instead of
// init's. However the supervisor ended, dlm then kills the group and reaps
// it until kill(-pgid) answers ESRCH (stopGroup), before it releases the
// lock; a group it cannot confirm gone keeps the lock unreleased.
//
// The supervisor is started from /proc/self/exe, the binary dlm runs from,
// even after the file at its path was replaced or deleted.
//
// dlm and the supervisor may die at once (kill -9 of dlm's process group),
// or be stopped (SIGSTOP, Ctrl-Z's SIGTSTP, a debugger, a frozen cgroup):
// a stopped process keeps its children running and its timers still. So
// the supervisor also starts a watchdog, the dlm binary with watchArg, in
// a process group of its own (neither dlm's, which a terminal signals, nor
// COMMAND's, which the supervisor kills when COMMAND exits), holding the
// other end of a second socket pair whose first end only dlm holds. dlm
// writes to its socket the lease's
// validity each time a renewal confirms it, as a deadline on
// CLOCK_MONOTONIC (writeDeadline): the first before COMMAND starts, later
// ones as renewals come. When a deadline passes unrenewed (dlm stopped,
// or too slow to act), the watchdog kills COMMAND's group and every process
// below dlm but the supervisor — what COMMAND started outside its group
// included — and exits. When its socket reaches end of file, dlm is gone
// (or done: it closes the socket once COMMAND's group is gone) and the
// watchdog kills COMMAND's group and exits.
//
// At the lease's end dlm also sends SIGKILL to the group and to everything
// below it but the supervisor, in case the supervisor cannot act (stopped),
// and kills a supervisor that has not exited a second later. A supervisor
// that is stopped while COMMAND's group has ended would keep dlm renewing:
// dlm checks once a second and, finding it so, kills the supervisor.
//
// Processes that leave COMMAND's group (setsid, setpgid) are followed while
// they stay below dlm: once their parent dies they are re-parented to dlm,
// a child subreaper, and before releasing the lock dlm kills and reaps
// every process below it (stopAdopted); one that does not go keeps the lock
// unreleased and is named.
//
// Not covered: the watchdog killed alone and then dlm and the supervisor
// at once; the watchdog stopped with dlm (SIGSTOP to each, a frozen
// cgroup); a process that leaves dlm's tree (re-parented to a subreaper outside
// it, such as a service manager that starts it for COMMAND, or to init
// because dlm was killed).
const superviseArg = "__supervise"

// watchArg starts the watchdog; see superviseArg.
const watchArg = "__watch"

// socketPair returns the two ends of a new Unix stream socket pair.
func socketPair(name string) (*os.File, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name), nil
}

// A supervised is COMMAND started under a supervisor.
type supervised struct {
	sup      *exec.Cmd
	conn     supervisorConn // closing it closes the watchdog's socket too: only once the group is gone
	pgid     int            // COMMAND's process group
	watchdog int            // the watchdog's pid
}

// startSupervised starts argv under a supervisor, with a watchdog that
// kills it all at deadline (see writeDeadline) unless told a later one.
func startSupervised(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, deadline int64) (*supervised, error) {
	mine, theirs, err := socketPair("dlm-supervisor")
	if err != nil {
		return nil, err
	}
	watchMine, watchTheirs, err := socketPair("dlm-watchdog")
	if err == nil {
		// Waits in the socket for the watchdog, however late it starts.
		err = writeDeadline(watchMine, deadline)
	}
	if err != nil {
		mine.Close()
		theirs.Close()
		if watchMine != nil {
			watchMine.Close()
			watchTheirs.Close()
		}
		return nil, err
	}
	sup := exec.Command(selfExe(), append([]string{superviseArg, "--"}, argv...)...)
	sup.Args[0] = "dlm" // for ps, instead of /proc/self/exe
	sup.Stdin, sup.Stdout, sup.Stderr, sup.Env = stdin, stdout, stderr, env
	sup.ExtraFiles = []*os.File{theirs, watchTheirs}
	err = sup.Start()
	theirs.Close() // from now on only the supervisor holds that end
	watchTheirs.Close()
	if err != nil {
		mine.Close()
		watchMine.Close()
		return nil, err
	}
	_ = mine.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(mine).ReadString('\n')
	_ = mine.SetReadDeadline(time.Time{})
	var pgid, wpid int
	_, perr := fmt.Sscanf(line, "%d %d\n", &pgid, &wpid)
	if err != nil || perr != nil {
		mine.Close()
		watchMine.Close()
		_ = sup.Wait() // it reported why on stderr and exits 127
		return nil, fmt.Errorf("could not start %s", quoteInput(argv[0]))
	}
	return &supervised{sup: sup, conn: supervisorConn{mine, watchMine}, pgid: pgid, watchdog: wpid}, nil
}

// noDeadline tells the watchdog to kill nothing until dlm is gone
// (--on-lost ignore).
const noDeadline = 0

// writeDeadline tells the watchdog to kill COMMAND's group, and what
// COMMAND started below dlm, once CLOCK_MONOTONIC reads deadline
// (nanoseconds; noDeadline: never) unless a later one comes first.
func writeDeadline(w io.Writer, deadline int64) error {
	_, err := w.Write(binary.BigEndian.AppendUint64(nil, uint64(deadline)))
	return err
}

// monoDeadline is until on CLOCK_MONOTONIC, less stopMargin. The clock is
// read before the time left, so a stop between the two only brings the
// deadline closer.
func monoDeadline(until time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(until)-stopMargin)
}

// A supervisorConn is dlm's end of the supervisor's socket and of the
// watchdog's.
type supervisorConn struct {
	*os.File
	watch *os.File
}

func (c supervisorConn) Close() error {
	c.watch.Close()
	return c.File.Close()
}

// signalGroup asks the supervisor to send sig to COMMAND's process group.
func signalGroup(conn io.Writer, sig syscall.Signal) {
	_, _ = conn.Write([]byte{byte(sig)})
}

// supervise is the supervisor's main: see superviseArg.
func supervise(argv []string) int {
	conn := os.NewFile(3, "dlm")
	if conn == nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "dlm: "+superviseArg+" is started by dlm run")
		return 2
	}
	// Signals sent to dlm's process group (a terminal's Ctrl-C) reach this
	// process too; dlm forwards them to COMMAND's group itself.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	// The sockets from dlm (3, and 4 for the watchdog) are not COMMAND's.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	// PR_SET_PDEATHSIG fires when the thread that started COMMAND ends: keep
	// this goroutine on its thread for good.
	runtime.LockOSThread()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlm run: %v\n", err)
		return 127
	}
	pgid := cmd.Process.Pid
	// COMMAND has not been waited for: its group exists.
	wpid, err := startWatchdog(pgid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlm run: watchdog: %v\n", err)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
		return 127
	}
	if _, err := fmt.Fprintf(conn, "%d %d\n", pgid, wpid); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := conn.Read(b); err != nil {
				// dlm is gone: its lease is no longer renewed. Processes
				// of the group that COMMAND's death orphans go to init,
				// which reaps them.
				killUntilGone(pgid, 10*time.Second)
				return
			}
			_ = syscall.Kill(-pgid, syscall.Signal(b[0]))
		}
	}()
	_ = cmd.Wait()
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // what COMMAND left running; dlm confirms it gone
	return exitStatus(cmd.ProcessState)
}

// startWatchdog starts the watchdog for COMMAND's process group pgid, in
// a group of its own, with the supervisor's file descriptor 4 (the
// watchdog's socket) as its 3, and returns its pid.
func startWatchdog(pgid int) (int, error) {
	sock := os.NewFile(4, "dlm-watchdog")
	if sock == nil {
		return 0, fmt.Errorf("no socket")
	}
	defer sock.Close() // the watchdog holds it from now on
	// The watchdog knows dlm and the supervisor by their pids: they are
	// its grandparent and parent, alive while its socket is open.
	w := exec.Command(selfExe(), watchArg, strconv.Itoa(pgid), strconv.Itoa(os.Getppid()), strconv.Itoa(os.Getpid()))
	w.Args[0] = "dlm"
	w.ExtraFiles = []*os.File{sock}
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		return 0, err
	}
	go func() { _ = w.Wait() }()
	return w.Process.Pid, nil
}

// watch is the watchdog's main: see superviseArg. args are COMMAND's
// process group, dlm's pid and the supervisor's.
func watch(args []string) int {
	sock := os.NewFile(3, "dlm")
	var pgid, dlmPid, supPid int
	if len(args) == 3 {
		pgid, _ = strconv.Atoi(args[0])
		dlmPid, _ = strconv.Atoi(args[1])
		supPid, _ = strconv.Atoi(args[2])
	}
	if sock == nil || pgid <= 0 || dlmPid <= 0 || supPid <= 0 {
		fmt.Fprintln(os.Stderr, "dlm: "+watchArg+" is started by dlm run")
		return 2
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	deadlines := make(chan int64)
	go readDeadlines(sock, deadlines)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case d, ok := <-deadlines:
			if !ok {
				// dlm is gone, whatever else is, or done.
				killUntilGone(pgid, 10*time.Second)
				return 0
			}
			timer.Stop()
			if d != noDeadline {
				timer.Reset(time.Duration(d - monoNow()))
			}
			continue
		case <-timer.C:
		}
		// The lease dlm last confirmed has ended and dlm did not act:
		// stopped, or too slow. Kill what runs below dlm but the
		// supervisor and this process (COMMAND's group, what left it),
		// until nothing is left or for at most ten seconds.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			if killTree(dlmPid, supPid, os.Getpid()) == 0 {
				break
			}
		}
		return 0
	}
}

// readDeadlines sends each deadline read from sock to c, and closes c at
// end of file.
func readDeadlines(sock io.Reader, c chan<- int64) {
	defer close(c)
	b := make([]byte, 8)
	for {
		if _, err := io.ReadFull(sock, b); err != nil {
			return
		}
		c <- int64(binary.BigEndian.Uint64(b))
	}
}

// killUntilGone sends SIGKILL to the process group pgid until none of it is
// left, or for at most bound. It reaps nothing.
func killUntilGone(pgid int, bound time.Duration) {
	end := time.Now().Add(bound)
	for pause := time.Millisecond; syscall.Kill(-pgid, syscall.SIGKILL) == nil && time.Now().Before(end); pause = min(2*pause, 20*time.Millisecond) {
		time.Sleep(pause)
	}
}

// stopGroup kills COMMAND's process group pgid, orphans of which are dlm's
// children (it is a child subreaper), and reaps them with r, until
// kill(-pgid) answers ESRCH: no process of the group is left, not even a
// zombie holding its id. It gives up with an error once deadline() has
// passed (the lease's validity: afterwards, stopping the group no longer
// keeps the rule), and at least a second after it began.
func stopGroup(pgid int, r *reaper, deadline func() time.Time) error {
	least := time.Now().Add(time.Second)
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		r.reap()
		switch err := syscall.Kill(-pgid, syscall.SIGKILL); {
		case err == syscall.ESRCH:
			return nil
		case err != nil:
			return fmt.Errorf("kill COMMAND's process group %d: %w", pgid, err)
		case time.Now().After(deadline()) && time.Now().After(least):
			return fmt.Errorf("processes of COMMAND's group %d still run after SIGKILL", pgid)
		}
		time.Sleep(pause)
	}
}

// A reaper reaps the exited children of dlm in COMMAND's process group:
// its orphans, re-parented to dlm (a child subreaper), and COMMAND itself
// when its supervisor died first, whose wait status it keeps.
type reaper struct {
	pgid   int // COMMAND's group, whose leader is COMMAND
	mu     sync.Mutex
	leader *syscall.WaitStatus
}

// reap reaps what has exited.
func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-r.pgid, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		if pid == r.pgid {
			r.mu.Lock()
			r.leader = &ws
			r.mu.Unlock()
		}
	}
}

// leaderStatus is COMMAND's wait status, when dlm reaped it.
func (r *reaper) leaderStatus() (syscall.WaitStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == nil {
		return 0, false
	}
	return *r.leader, true
}

// reapUntil reaps, until stop is closed, as processes of COMMAND's group
// orphaned to dlm exit, so that they do not stay zombies while COMMAND
// runs.
func (r *reaper) reapUntil(stop <-chan struct{}) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	for {
		select {
		case <-chld:
			r.reap()
		case <-stop:
			return
		}
	}
}
