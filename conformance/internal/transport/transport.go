// Package transport is how package conformance/harness hands package
// conformance the server it owns and the fault point in front of it, without
// either package exporting the plumbing: harness registers a Transport for
// its test, and conformance.RunNode looks it up.
package transport

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// A Transport is a redis-server owned by the suite, reached through a fault
// point at Addr that nodes dial. Every method returns once the fault is in
// force on every connection, existing ones included.
type Transport struct {
	// Addr is the fault point nodes dial; it forwards to the server.
	Addr string
	// Stall makes the server answer nobody for d (its connections stay
	// open) and returns when it answers again.
	Stall func(d time.Duration) error
	// CutReplies, while on, lets commands through Addr reach the server and
	// closes every connection that a reply comes back on, the reply dropped.
	CutReplies func(on bool) error
	// DelayReplies holds every reply through Addr for d; 0 forwards at once.
	DelayReplies func(d time.Duration) error
	// Hang, while on, closes every connection through Addr and makes new
	// TCP connects to Addr hang: the SYNs are never answered.
	Hang func(on bool) error
	// Crashed returns nil while the server runs, and once it has exited
	// an error that says how, with the tail of its log.
	Crashed func() error
	// NewNode, when set, returns the nodes the rules that need this
	// transport run on (nodes of Addr), the other rules running on the
	// nodes given to RunNode (harness.Own); when nil, every rule runs on
	// RunNode's nodes (harness.Run).
	NewNode func(t *testing.T) driver.Node
	// Dial returns a Node of the driver under test over a new client of
	// addr (host:port), closed when t ends, or the error of a client that
	// connects when it is made.
	Dial func(t *testing.T, addr string) (driver.Node, error)
	// DialSentinel, when not nil, returns a Node of the driver under test
	// for the primary that the Sentinels at addrs know as master, or the
	// dial's error.
	DialSentinel func(t *testing.T, addrs []string, master string) (driver.Node, error)
	// Refusers starts servers that refuse scripts, each for a reason of
	// its own, and stops them when t ends.
	Refusers func(t testing.TB) (*Refusers, error)
	// WaitAOFServer, when not nil, starts (once per call) a server that
	// answers WAITAOF (Valkey 8.0, Redis 7.2 or later) with its
	// append-only file on, stopped when t ends, and returns its address,
	// reached directly; it returns "" and the reason when none can be
	// started. RunWaitAOF uses it where the rule's server lacks WAITAOF.
	WaitAOFServer func(t testing.TB) (addr, why string)
	// DialTLS, when not nil, returns a Node of the driver under test over
	// a new client of addr that speaks TLS with cfg, or the dial's error.
	DialTLS func(t *testing.T, addr string, cfg *tls.Config) (driver.Node, error)
	// TLSServer starts a server that speaks TLS only (client certificates
	// required), stopped when t ends, and returns its address, a client
	// configuration that trusts its CA (right) and one that trusts another
	// CA (wrong), both with a client certificate it accepts.
	TLSServer func(t testing.TB) (addr string, right, wrong *tls.Config)
	// FreezeReplica, while on, stops the server's one replica (SIGSTOP):
	// it stays connected and acknowledges nothing more. Off resumes it and
	// returns once it acknowledges writes again.
	FreezeReplica func(on bool) error
}

// Refusers are servers started for the PermanentErrors rule, reached
// directly (no fault point), by address.
type Refusers struct {
	NoScripting string // EVAL and EVALSHA renamed away: "ERR unknown command"
	NeedsAuth   string // requirepass set; nodes send no password: NOAUTH
	NoPerm      string // the default user may not run scripts: NOPERM
	Busy        string // busy-reply-threshold 100ms, free until made busy: BUSY
	Sentinel    string // a Sentinel: "ERR unknown command" for scripts
	Master      string // the master name Sentinel knows (the suite's server)
	Refused     string // nothing listens: connections are refused
}

var (
	mu         sync.Mutex
	transports = map[*testing.T]*Transport{}
)

// Register makes tr the transport of RunNode calls made with t, until t ends.
func Register(t *testing.T, tr *Transport) {
	mu.Lock()
	transports[t] = tr
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		delete(transports, t)
		mu.Unlock()
	})
}

// Lookup returns the transport registered for t, or nil.
func Lookup(t *testing.T) *Transport {
	mu.Lock()
	defer mu.Unlock()
	return transports[t]
}

// Do sends one command to the server at addr on a connection of its own
// and returns its reply's first line without the type byte; an error reply
// is an error. It serves PING and SCRIPT FLUSH, whose replies are one line.
func Do(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, min(timeout, 5*time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply from %s", addr)
	}
	if line[0] == '-' {
		return "", fmt.Errorf("%s: %s", addr, line[1:])
	}
	return line[1:], nil
}

// BusyClock defines a Lua function now() for busy-waiting: the server's
// clock in microseconds, and one that moves while a script runs. Valkey
// 8.0 answers TIME with the time its script began for as long as the
// script runs (a loop on TIME never ends) but has os.clock, the server's
// CPU time, which a busy loop spends; Redis 7.0 and earlier have no os
// (reading it is an error, which pcall catches) and a TIME that moves.
const BusyClock = `local clocked, clock = pcall(function() return os.clock end)
local function now()
  if clocked and clock then
    return clock() * 1000000
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// BusyScript busy-waits for ARGV[1] microseconds (BusyClock), so the
// server answers nobody meanwhile, and replies {1}.
const BusyScript = BusyClock + `local start = now()
while now() - start < tonumber(ARGV[1]) do end
return {1}`
