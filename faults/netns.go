package faults

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Net is a private network for one run: every Host is a Linux network
// namespace of its own, linked by a veth pair to a router, a namespace of
// its own that forwards between them. The runner's namespace is linked
// too, as Runner, so that it can reach every host (and the hosts reach the
// fenced register it serves). A partition is a pair of blackhole rules in
// the router: the packets are dropped in transit, so established
// connections stall and new ones hang, both ways, as in a real partition,
// and heal when the rules go. Every namespace is held by a process that
// dies with the runner (Pdeathsig), so nothing outlives a killed run: the
// namespaces, their links and the route to the network go with their
// holders. Creating one needs root.
type Net struct {
	prefix string // the /24's first three octets and a dot: host i has .4i+2, the router .4i+1
	link   string // prefix of link names, unique to the run
	slot   int    // of nets, this process's: freed when Close returns
	router *exec.Cmd
	Runner string // the runner's address on the network

	mu    sync.Mutex
	hosts []*Host
}

// A Host is one network namespace on a Net, with one address.
type Host struct {
	Name   string
	IP     string
	holder *exec.Cmd
	net    *Net
}

// NewNet creates a network for this process' run.
func NewNet() (*Net, error) {
	slot, err := takeSlot()
	if err != nil {
		return nil, err
	}
	id := os.Getpid()*8 + slot
	n := &Net{
		slot:   slot,
		prefix: fmt.Sprintf("10.%d.%d.", 200+(id/250)%50, id%250),
		link:   fmt.Sprintf("df%d", id%1000000),
	}
	if n.router, err = holder(); err != nil {
		return nil, err
	}
	if err := nsRun(n.router, "sysctl -qw net.ipv4.ip_forward=1 && ip link set lo up"); err != nil {
		n.Close()
		return nil, err
	}
	// The runner is host 0, in its own namespace.
	a, b := n.link+"h0a", n.link+"h0b"
	n.Runner = n.addr(0, 2)
	if err := runCmd("sh", "-c", fmt.Sprintf("ip link add %s type veth peer name %s && ip link set %s netns %d && "+
		"ip addr add %s/30 dev %s && ip link set %s up", a, b, a, n.router.Process.Pid, n.Runner, b, b)); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.routerSide(0, a); err != nil {
		n.Close()
		return nil, err
	}
	if err := runCmd("ip", "route", "add", n.prefix+"0/24", "via", n.addr(0, 1)); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Net) addr(host, last int) string { return fmt.Sprintf("%s%d", n.prefix, 4*host+last) }

// routerSide configures the router's end a of host i's link.
func (n *Net) routerSide(i int, a string) error {
	return nsRun(n.router, fmt.Sprintf("ip addr add %s/30 dev %s && ip link set %s up", n.addr(i, 1), a, a))
}

// AddHost creates a host with the next free address.
func (n *Net) AddHost(name string) (*Host, error) {
	n.mu.Lock()
	i := len(n.hosts) + 1
	n.mu.Unlock()
	if i > 63 {
		return nil, fmt.Errorf("faults: too many hosts")
	}
	h, err := holder()
	if err != nil {
		return nil, err
	}
	host := &Host{Name: name, IP: n.addr(i, 2), holder: h, net: n}
	a, b := fmt.Sprintf("%sh%da", n.link, i), fmt.Sprintf("%sh%db", n.link, i)
	err = runCmd("sh", "-c", fmt.Sprintf("ip link add %s type veth peer name %s && ip link set %s netns %d && ip link set %s netns %d",
		a, b, a, n.router.Process.Pid, b, h.Process.Pid))
	if err == nil {
		err = n.routerSide(i, a)
	}
	if err == nil {
		err = nsRun(h, fmt.Sprintf("ip link set lo up && ip addr add %s/30 dev %s && ip link set %s up && ip route add default via %s",
			host.IP, b, b, n.addr(i, 1)))
	}
	if err != nil {
		kill(h)
		return nil, err
	}
	n.mu.Lock()
	n.hosts = append(n.hosts, host)
	n.mu.Unlock()
	return host, nil
}

// Partition cuts every host of a off from every host of b, both ways: an
// address in a or b may also be the Runner's.
func (n *Net) Partition(a, b []string) error {
	var cmds []string
	for _, x := range a {
		for _, y := range b {
			cmds = append(cmds, fmt.Sprintf("ip rule add pref 100 from %s to %s blackhole", x, y),
				fmt.Sprintf("ip rule add pref 100 from %s to %s blackhole", y, x))
		}
	}
	return nsRun(n.router, strings.Join(cmds, " && "))
}

// Heal removes every partition and every loss.
func (n *Net) Heal() error {
	return nsRun(n.router, "while ip rule del pref 100 2>/dev/null; do :; done; nft delete table inet dlmloss 2>/dev/null; true")
}

// Loss drops percent% of the packets to and from every address of ips, at
// random, in the router (nftables' numgen): true packet loss, which TCP
// answers with retransmissions. Heal removes it.
func (n *Net) Loss(ips []string, percent int) error {
	cmds := []string{"nft add table inet dlmloss",
		"nft add chain inet dlmloss forward '{ type filter hook forward priority 0; policy accept; }'"}
	for _, ip := range ips {
		for _, dir := range []string{"saddr", "daddr"} {
			cmds = append(cmds, fmt.Sprintf("nft add rule inet dlmloss forward ip %s %s numgen random mod 100 '<' %d drop", dir, ip, percent))
		}
	}
	return nsRun(n.router, strings.Join(cmds, " && "))
}

// Command returns a command that runs in h's namespace and is killed when
// the runner dies.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(h.holder.Process.Pid), "-n", "--", name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// Close ends every host's namespace and the network.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.hosts {
		kill(h.holder)
	}
	n.hosts = nil
	kill(n.router) // takes the links, the runner's address and its route along
	// The kernel dismantles a namespace in the background: wait, so that
	// a caller that returns leaves nothing behind (a later Net of this
	// process may take the same link names). Under load this took over
	// the 2s once waited here; 30s bounds a kernel that never finishes.
	// Its slot is freed only then: one whose links linger stays taken.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if exec.Command("ip", "link", "show", n.link+"h0b").Run() != nil {
			if n.slot >= 0 {
				freeSlot(n.slot)
				n.slot = -1
			}
			return
		}
	}
}

// nets are the slots of this process's networks (its link names and
// addresses): a slot is taken until its Net's Close returns, so that
// networks that live side by side never share one (a counter modulo 8
// did, once tests beside the short matrix made nets while one of its
// cells ran).
var (
	netsMu sync.Mutex
	nets   [8]bool
)

func takeSlot() (int, error) {
	netsMu.Lock()
	defer netsMu.Unlock()
	for i, used := range nets {
		if !used {
			nets[i] = true
			return i, nil
		}
	}
	return 0, fmt.Errorf("faults: more than %d networks at once in one process", len(nets))
}

func freeSlot(i int) {
	netsMu.Lock()
	defer netsMu.Unlock()
	nets[i] = false
}

// holder starts a process that does nothing in a new network namespace,
// which lives as long as it does.
func holder() (*exec.Cmd, error) {
	cmd := exec.Command("sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("faults: a network namespace needs root: %w", err)
	}
	return cmd, nil
}

func kill(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// nsRun runs a shell command line in the namespace of holder h.
func nsRun(h *exec.Cmd, line string) error {
	return runCmd("nsenter", "-t", fmt.Sprint(h.Process.Pid), "-n", "--", "sh", "-c", line)
}

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("faults: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
