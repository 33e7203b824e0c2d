package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
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
// dlm and the supervisor may die at once (kill -9 of dlm's process group).
// So the supervisor also starts a watchdog, the dlm binary with watchArg,
// inside COMMAND's group, holding the other end of a second socket pair
// whose first end only dlm holds. The watchdog ignores the signals dlm
// forwards to the group; when its socket reaches end of file, dlm is gone
// and the watchdog kills its own group, itself included. It dies with the
// group in every other case.
//
// At the lease's end dlm also sends SIGKILL to the group itself, in case
// the supervisor cannot act (stopped), and kills a supervisor that has not
// exited a second later.
//
// Not covered: the watchdog killed alone and then dlm and the supervisor
// at once; a process that leaves COMMAND's group (setsid, setpgid).
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

// startSupervised starts argv under a supervisor and returns it, the
// socket to send it signals on, and the id of COMMAND's process group;
// closing the socket also closes dlm's end of the watchdog's socket, so
// close it only once COMMAND's group is gone.
func startSupervised(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*exec.Cmd, io.ReadWriteCloser, int, error) {
	mine, theirs, err := socketPair("dlm-supervisor")
	if err != nil {
		return nil, nil, 0, err
	}
	watchMine, watchTheirs, err := socketPair("dlm-watchdog")
	if err != nil {
		mine.Close()
		theirs.Close()
		return nil, nil, 0, err
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
		return nil, nil, 0, err
	}
	_ = mine.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(mine).ReadString('\n')
	_ = mine.SetReadDeadline(time.Time{})
	pgid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		mine.Close()
		watchMine.Close()
		_ = sup.Wait() // it reported why on stderr and exits 127
		return nil, nil, 0, fmt.Errorf("could not start %q", argv[0])
	}
	return sup, supervisorConn{mine, watchMine}, pgid, nil
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
	if err := startWatchdog(pgid); err != nil {
		fmt.Fprintf(os.Stderr, "dlm run: watchdog: %v\n", err)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
		return 127
	}
	if _, err := fmt.Fprintf(conn, "%d\n", pgid); err != nil {
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

// startWatchdog starts the watchdog in the process group pgid, with the
// supervisor's file descriptor 4 (the watchdog's socket) as its 3.
func startWatchdog(pgid int) error {
	sock := os.NewFile(4, "dlm-watchdog")
	if sock == nil {
		return fmt.Errorf("no socket")
	}
	defer sock.Close() // the watchdog holds it from now on
	w := exec.Command(selfExe(), watchArg)
	w.Args[0] = "dlm"
	w.ExtraFiles = []*os.File{sock}
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	if err := w.Start(); err != nil {
		return err
	}
	go func() { _ = w.Wait() }()
	return nil
}

// watch is the watchdog's main: see superviseArg.
func watch() int {
	sock := os.NewFile(3, "dlm")
	if sock == nil {
		fmt.Fprintln(os.Stderr, "dlm: "+watchArg+" is started by dlm run")
		return 2
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	b := make([]byte, 1)
	for {
		if _, err := sock.Read(b); err != nil {
			break // dlm is gone, whatever else is
		}
	}
	_ = syscall.Kill(0, syscall.SIGKILL) // this group, this process last
	return 0
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
// children (it is a child subreaper), and reaps them, until kill(-pgid)
// answers ESRCH: no process of the group is left, not even a zombie holding
// its id. It gives up with an error once deadline() has passed (the lease's
// validity: afterwards, stopping the group no longer keeps the rule), and
// at least a second after it began.
func stopGroup(pgid int, deadline func() time.Time) error {
	least := time.Now().Add(time.Second)
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		reapGroup(pgid)
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

// reapGroup reaps the exited children of dlm in the process group pgid.
func reapGroup(pgid int) {
	for {
		pid, err := syscall.Wait4(-pgid, nil, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// reapOrphans reaps, until stop is closed, the processes of COMMAND's group
// orphaned to dlm (a child subreaper) as they exit, so that they do not stay
// zombies while COMMAND runs.
func reapOrphans(pgid int, stop <-chan struct{}) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	for {
		select {
		case <-chld:
			reapGroup(pgid)
		case <-stop:
			return
		}
	}
}
