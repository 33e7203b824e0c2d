package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The servers of one process get ports from a block of portBlock ports that
// the process holds alone (an flock on a file in the temporary directory,
// released when the process ends), handed out in turn, so that a port a
// test freed (a killed server's, with a Cluster's other nodes still
// gossiping to it) is not given again, to this process or another, while
// the block has others. Ports the kernel picks (bind to port 0) are reused
// within seconds: the conformance suite's "connection refused" address
// once reached a Sentinel another suite had started on it. The blocks lie
// below 22000, so that a Cluster node's bus port (its port + 10000) stays
// below the kernel's ephemeral ports (32768 onwards). A process that finds
// no block free takes ports the kernel picks.
const (
	portBase   = 10000
	portBlock  = 1000
	portBlocks = 12
	busOffset  = 10000 // a Cluster node's bus port is its port + busOffset
)

var ports struct {
	sync.Mutex
	claimed bool     // a block was tried for
	first   int      // the block's first port; 0 for none
	next    int      // the offset in the block to try next
	lock    *os.File // the block's lock file, open (and locked) for the life of the process
}

// claimBlock takes the first block, in random order, that no other
// process holds, and keeps its lock file open for the life of the process
// in ports.lock: a file nothing refers to is closed by its finalizer at
// the next garbage collection, and its lock goes with it.
func claimBlock() int {
	for _, i := range rand.Perm(portBlocks) {
		first := portBase + i*portBlock
		name := filepath.Join(lockDir(), fmt.Sprintf("redistest-ports-%d.lock", first))
		f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		ports.lock = f
		return first
	}
	return 0
}

// locksEnv names the directory of the port blocks' lock files, when it is
// not the temporary directory: a test binary run as a subprocess has a
// temporary directory of its own (SubprocessEnv), and must lock its block
// where every other test process does.
const locksEnv = "REDISTEST_LOCKS"

func lockDir() string {
	if d := os.Getenv(locksEnv); d != "" {
		return d
	}
	return os.TempDir()
}

// SubprocessEnv returns the environment for a test binary that t runs as
// a subprocess, with extra added: its temporary directory is one of t's,
// removed with it even when the subprocess is killed and so cleans up
// nothing (a watchdog's exit, a kill), and it takes its servers' ports as
// every test process does.
func SubprocessEnv(t testing.TB, extra ...string) []string {
	return append(os.Environ(), append([]string{"TMPDIR=" + t.TempDir(), locksEnv + "=" + lockDir()}, extra...)...)
}

// freePort returns a port on host for a server to listen on, whose bus
// port is free too.
func freePort(host string) (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if !ports.claimed {
		ports.claimed, ports.first = true, claimBlock()
	}
	if ports.first != 0 {
		for range portBlock {
			p := ports.first + ports.next
			ports.next = (ports.next + 1) % portBlock
			if portFree(host, p) && portFree(host, p+busOffset) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portFree reports whether a listener (with SO_REUSEADDR, as a server's)
// can bind port on host now.
func portFree(host string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// listens reports whether process pid has a TCP socket listening on port,
// as its network namespace's /proc tables show; false when they cannot be
// read (a process that exited).
func listens(pid, port int) bool {
	inodes := map[string]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		// Each line after the header: sl local_address rem_address st
		// … inode, the address as hex IP:port, LISTEN as state 0A.
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[target] {
			return true
		}
	}
	return false
}
