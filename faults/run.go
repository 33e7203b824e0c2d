package faults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A Cell is one run: a strategy under a nemesis, with Clients client
// processes contending for one key for Duration, and then, when they have
// not yet made MinAttempts Lock calls, until they have (at most four times
// Duration in all).
type Cell struct {
	Strategy string
	Nemesis  string
	Clients  int
	// Workers is how many goroutines of each client process lock the key
	// through the process's one Manager (at least 1): with two or more, an
	// Unlock hands the lock to a waiting goroutine of its process. Each
	// goroutine is a client of its own in the events.
	Workers int
	// Primitive is what the clients take: "" the plain lock, "fairlock",
	// "election" (strategies of one deployment only), "semaphore" (a
	// permit of a semaphore of 2), "rwlock" (a read-write lock of 2
	// readers, every third hold a writer's) or "multilock" (two of three
	// keys).
	Primitive   string
	Duration    time.Duration
	MinAttempts int
	TTL         time.Duration // the leases'
	Hold        time.Duration // how long a holder keeps the lock
	Wait        time.Duration // how long a Lock call may wait
	Plant       string        // a bug planted on purpose, to show that the suite finds it: in the clients ("stale-lease"), or in the register's store ("unfenced-store")
	// Register names the store the register keeps its fences and data in
	// (Registers): "" its own map, "postgres" or "redis" a real store that
	// checks the fence with the write (package fencing).
	Register string `json:",omitempty"`
	// LateWrites makes every holder whose lease ends during a long hold
	// (a paused or cut-off holder, a failover) write with its old fence
	// without checking its lease, half a TTL after the lease's end and
	// again three TTLs after, as a process that checked its lease and then
	// stalled: late writes only the store's fence check can refuse.
	LateWrites bool `json:",omitempty"`
}

func (c Cell) workers() int { return max(c.Workers, 1) }

// Taken names what the cell's clients take: the strategy, and the
// primitive over it when not the plain lock ("single/fairlock").
// With a store for the register, its name follows an '@'
// ("redlock@postgres").
func (c Cell) Taken() string {
	t := c.Strategy
	if c.Primitive != "" {
		t += "/" + c.Primitive
	}
	if c.Register != "" {
		t += "@" + c.Register
	}
	return t
}

// clientKey is the key every client locks.
const clientKey = "fenced"

// A run is a Cell being carried out.
type run struct {
	cell    Cell
	net     *Net
	topo    *topology
	reg     *register
	clients []*clientProc

	stopAt atomic.Int64 // when the clients and the nemesis stop, on the monotonic clock

	mu       sync.Mutex
	events   []Event
	attempts int      // Acquire events so far
	struck   bool     // the nemesis has struck and healed (a Heal event)
	granted  chan int // the client of each grant, when a nemesis waits for one
}

// stopWhenDone ends the run once it has lasted until from, the clients
// have made min Lock calls and the nemesis (if any) has struck and healed
// (a run stopped in the middle of a fault would miss what the fault
// does): the clients finish their operation and stop (SIGTERM), and the
// nemesis strikes no more. On a loaded machine the nemesis's first strike, which
// waits for a long hold to be granted, can come after from.
func (r *run) stopWhenDone(from int64, min int) {
	for {
		time.Sleep(100 * time.Millisecond)
		t := now()
		if t >= r.stopAt.Load() {
			return
		}
		r.mu.Lock()
		enough := r.attempts >= min && (r.struck || r.cell.Nemesis == "none")
		r.mu.Unlock()
		if t >= from && enough {
			r.stopAt.Store(t)
			for _, c := range r.clients {
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
			}
			return
		}
	}
}

type clientProc struct {
	id   int
	host *Host
	cmd  *exec.Cmd
	done chan struct{}
}

// RunCell starts cell's topology, clients and nemesis on a fresh network,
// and returns every event of the run, sorted by time. Everything it
// started is gone when it returns.
func RunCell(cell Cell, dir string) ([]Event, error) {
	nem := findNemesis(cell.Nemesis)
	if nem == nil {
		return nil, fmt.Errorf("faults: unknown nemesis %q", cell.Nemesis)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r := &run{cell: cell, granted: make(chan int, 1)}
	if r.net, err = NewNet(); err != nil {
		return nil, err
	}
	defer r.net.Close()
	var st store
	if cell.Register != "" {
		if st, err = openStore(cell.Register, r.net, dir, cell.Plant == unfencedStore); err != nil {
			return nil, err
		}
		defer st.close()
	}
	if r.reg, err = startRegister(r.net.Runner, st); err != nil {
		return nil, err
	}
	defer r.reg.close()
	r.topo, err = startTopology(r.net, dir, cell.Strategy, nem.persist, nem.proxied, nem.clocked, cell.TTL)
	defer r.topo.stop()
	if err != nil {
		return nil, err
	}
	longest := cell.Duration
	if cell.MinAttempts > 0 {
		longest = 4 * cell.Duration
	}
	start := now()
	r.stopAt.Store(start + int64(longest))
	for i := 1; i <= cell.Clients; i++ {
		if err := r.startClient(self, i, r.stopAt.Load()); err != nil {
			r.killClients()
			return nil, err
		}
	}
	nemDone := make(chan error, 1)
	go func() { nemDone <- r.nemesis(nem) }()
	if cell.MinAttempts > 0 {
		go r.stopWhenDone(start+int64(cell.Duration), cell.MinAttempts)
	}
	// Clients stop on their own at the latest after the longest run; one
	// still running well after (a bug, a hang) is killed.
	deadline := time.After(longest + cell.Wait + 15*time.Second)
	for _, c := range r.clients {
		select {
		case <-c.done:
		case <-deadline:
			r.killClients()
			return nil, fmt.Errorf("faults: client %d still running %v after the run's end", c.id, cell.Wait+15*time.Second)
		}
	}
	if err := <-nemDone; err != nil {
		return nil, err
	}
	r.mu.Lock()
	events := append(r.events, r.reg.history()...)
	r.mu.Unlock()
	sortEvents(events)
	return events, nil
}

func sortEvents(events []Event) {
	sort.SliceStable(events, func(i, j int) bool { return events[i].T < events[j].T })
}

// findNemesis returns the nemesis of a name: one of nemeses, or several
// of them joined by '+' (see combined).
func findNemesis(name string) *nemesis {
	if strings.Contains(name, "+") {
		return combined(name)
	}
	for _, n := range nemeses {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func (r *run) startClient(self string, id int, stopAt int64) error {
	h, err := r.net.AddHost(fmt.Sprintf("client%d", id))
	if err != nil {
		return err
	}
	spec, _ := json.Marshal(clientConfig{ID: id, Workers: r.cell.workers(), Primitive: r.cell.Primitive, URL: r.topo.URL, Key: clientKey, TTL: r.cell.TTL, Wait: r.cell.Wait,
		Hold: r.cell.Hold, Register: r.reg.Addr, Stop: stopAt, Plant: r.cell.Plant, LateWrite: r.cell.LateWrites})
	cmd := h.Command(self)
	cmd.Env = append(os.Environ(), clientEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c := &clientProc{id: id, host: h, cmd: cmd, done: make(chan struct{})}
	r.clients = append(r.clients, c)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				r.record(e)
			}
		}
		_ = cmd.Wait()
	}()
	return nil
}

func (r *run) record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	switch e.Kind {
	case Acquire:
		r.attempts++
	case Heal:
		r.struck = true
	}
	if e.Kind == Granted && e.Info == grantedLong {
		select {
		case r.granted <- e.Client:
		default:
		}
	}
}

// holder asks a client for a long hold (SIGUSR1), waits until one holds the
// lock so, and returns it; nil if none did while the run could still take a
// strike. The client asked first is the one granted last: a Manager hands
// the lock to its own waiters, so the lock can stay in one process for
// seconds while the others get no grant. Every 3s without a grant one more,
// picked at random, is asked.
func (r *run) holder() *clientProc {
	select {
	case <-r.granted: // an older grant
	default:
	}
	ask := r.lastGranted()
	last := r.stopAt.Load() - int64(r.cell.TTL) - int64(time.Second) // time for a strike
	for now() < last {
		if ask == nil {
			ask = r.clients[rand.IntN(len(r.clients))]
		}
		_ = ask.cmd.Process.Signal(syscall.SIGUSR1)
		ask = nil
		select {
		case id := <-r.granted:
			return r.clients[(id-1)/r.cell.workers()]
		case <-time.After(min(3*time.Second, time.Duration(max(last-now(), 0)))):
		}
	}
	return nil
}

// lastGranted returns the client process of the latest grant, nil before
// the first.
func (r *run) lastGranted() *clientProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; e.Kind == Granted && e.Client > 0 {
			return r.clients[(e.Client-1)/r.cell.workers()]
		}
	}
	return nil
}

func (r *run) clientIPs() []string {
	var out []string
	for _, c := range r.clients {
		out = append(out, c.host.IP)
	}
	return out
}

func (r *run) killClients() {
	for _, c := range r.clients {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		<-c.done
	}
}

// nemesis runs nem in cycles until the run stops: a second of calm, the
// fault for its hold time, calm again for as long as the fault lasted (at
// least 1s).
func (r *run) nemesis(nem *nemesis) error {
	if nem.Name == "none" {
		return nil
	}
	for {
		time.Sleep(time.Second)
		hold := nem.hold(r.cell.TTL)
		if now()+int64(hold+time.Second) > r.stopAt.Load() {
			return nil
		}
		if !nem.onHolder {
			// Strike while a client is in the middle of a long hold: the
			// fault then meets a lease it can break.
			r.holder()
		}
		desc, heal, err := nem.fault(r)
		if err != nil {
			return err
		}
		if heal == nil {
			continue // nothing to do this time (no holder)
		}
		r.record(Event{T: now(), Kind: Fault, Info: desc})
		time.Sleep(hold)
		heal()
		r.record(Event{T: now(), Kind: Heal, Info: desc})
		time.Sleep(max(hold, time.Second))
	}
}
