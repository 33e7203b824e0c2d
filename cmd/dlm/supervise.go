package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
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
// SIGKILL included): the supervisor kills the group at once. When COMMAND
// exits, the supervisor kills what it left running in its group and exits
// with COMMAND's status.
const superviseArg = "__supervise"

// startSupervised starts argv under a supervisor and returns it, the
// socket to send it signals on, and the id of COMMAND's process group.
func startSupervised(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*exec.Cmd, *os.File, int, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, 0, err
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "dlm-supervisor"), os.NewFile(uintptr(fds[1]), "dlm-supervisor")
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	sup := exec.Command(self, append([]string{superviseArg, "--"}, argv...)...)
	sup.Stdin, sup.Stdout, sup.Stderr, sup.Env = stdin, stdout, stderr, env
	sup.ExtraFiles = []*os.File{theirs}
	err = sup.Start()
	theirs.Close() // from now on only the supervisor holds that end
	if err != nil {
		mine.Close()
		return nil, nil, 0, err
	}
	_ = mine.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(mine).ReadString('\n')
	_ = mine.SetReadDeadline(time.Time{})
	pgid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		mine.Close()
		_ = sup.Wait() // it reported why on stderr and exits 127
		return nil, nil, 0, fmt.Errorf("could not start %q", argv[0])
	}
	return sup, mine, pgid, nil
}

// signalGroup asks the supervisor to send sig to COMMAND's process group.
func signalGroup(conn *os.File, sig syscall.Signal) {
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
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlm run: %v\n", err)
		return 127
	}
	pgid := cmd.Process.Pid
	if _, err := fmt.Fprintf(conn, "%d\n", pgid); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := conn.Read(b); err != nil {
				// dlm is gone: its lease is no longer renewed.
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				return
			}
			_ = syscall.Kill(-pgid, syscall.Signal(b[0]))
		}
	}()
	_ = cmd.Wait()
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // what COMMAND left running
	return exitStatus(cmd.ProcessState)
}
