package dlmtest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/dlmgo/dlm/nodekit"
)

// A server is one redis-server process: a primary or a replica.
type server struct {
	owner   *Server
	clock   *Clock
	data    map[string]*value
	scripts map[string]*lua.FunctionProto
	lua     *lua.LState
	runID   string
	replID  string
	replID2 string    // set by a promotion: the former primary's replID
	started time.Time // by clock
	stats   map[string]int64
	dirty   map[string]struct{} // keys written by the running command
}

func newServer(owner *Server, clock *Clock) *server {
	sv := &server{owner: owner, clock: clock}
	sv.restart(false)
	return sv
}

// restart starts the process again: a new run_id, no cached scripts, no
// statistics, and the data kept or lost.
func (sv *server) restart(keep bool) {
	if !keep || sv.data == nil {
		sv.data = map[string]*value{}
	}
	sv.scripts = map[string]*lua.FunctionProto{}
	if sv.lua != nil {
		sv.lua.Close()
		sv.lua = nil
	}
	sv.runID, sv.replID, sv.replID2 = randomID(), randomID(), strings.Repeat("0", 40)
	sv.started = sv.clock.Now()
	sv.stats = map[string]int64{}
}

func randomID() string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// A Server is an in-process Redis deployment: a primary, with the replicas
// NewServer was asked for, that every Node of it follows (as a client of a
// Sentinel-managed primary does). It runs dlm's Lua scripts as Redis 7.0
// does, one command at a time. Its methods are safe for concurrent use.
type Server struct {
	name  string
	exec  chan struct{} // held while a command runs, and while paused
	close chan struct{}
	nodes atomic.Int64

	mu       sync.Mutex // guards what follows; never held while waiting
	primary  *server
	replicas []*Replica
	offset   int64         // replication offset: one per write command
	promoted int64         // counts promotions: a WAIT begun before one fails
	acked    chan struct{} // closed when a replica's acknowledged offset moves
	paused   bool
	closed   bool
	link     linkFaults
	subs     map[string]map[*subscription]struct{}
}

// An Option configures a Server.
type Option func(*Server)

// WithReplicas gives the server n replicas, which receive every write and
// answer WAIT (see Replica).
func WithReplicas(n int) Option {
	return func(s *Server) {
		for range n {
			s.replicas = append(s.replicas, &Replica{s: s, sv: newServer(s, newClock())})
		}
	}
}

// WithName names the server in errors (Node.String); the default is
// "dlmtest-1", "dlmtest-2", ... in the order servers were made.
func WithName(name string) Option { return func(s *Server) { s.name = name } }

var serverSeq atomic.Int64

// NewServer starts a server. Close it when done (under testing/synctest,
// before the bubble ends: it ends the goroutines its faults keep waiting).
func NewServer(opts ...Option) *Server {
	s := &Server{
		name:  fmt.Sprintf("dlmtest-%d", serverSeq.Add(1)),
		exec:  make(chan struct{}, 1),
		close: make(chan struct{}),
		acked: make(chan struct{}),
		subs:  map[string]map[*subscription]struct{}{},
	}
	s.primary = newServer(s, newClock())
	for _, o := range opts {
		o(s)
	}
	for _, r := range s.replicas {
		r.sv.data = cloneData(s.primary.data)
	}
	return s
}

// String returns the server's name.
func (s *Server) String() string { return s.name }

// Close ends the server: calls waiting for it fail with ErrClosed, and so
// do calls made afterwards. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.close)
		for _, subs := range s.subs {
			for sub := range subs {
				sub.end()
			}
		}
	}
}

// Clock returns the primary's clock. After Promote it is the promoted
// replica's.
func (s *Server) Clock() *Clock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.primary.clock
}

// Replicas returns the server's replicas.
func (s *Server) Replicas() []*Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.replicas)
}

// acquire takes the server to run a command, waiting while another runs
// or the server is paused; it reports false once the server is closed.
func (s *Server) acquire() bool {
	select {
	case s.exec <- struct{}{}:
		select {
		case <-s.close:
			<-s.exec
			return false
		default:
			return true
		}
	case <-s.close:
		return false
	}
}

func (s *Server) release() { <-s.exec }

// run runs f on the primary as one command: it waits for the server, takes
// the Slow fault's time, and replicates the keys f wrote.
func (s *Server) run(f func(sv *server) any) (any, bool) {
	if !s.acquire() {
		return nil, false
	}
	defer s.release()
	s.mu.Lock()
	slow, sv := s.link.slow, s.primary
	s.mu.Unlock()
	if slow > 0 {
		time.Sleep(slow)
	}
	sv.dirty = map[string]struct{}{}
	r := f(sv)
	s.replicate(sv)
	return r, true
}

// Do runs one command on the primary as a script's redis.call would (see
// Commands), with no fault of a link, and returns its reply: int64, string,
// nil, []any, or an error (a *driver.ReplyError) for an error reply; a
// status reply is returned as a string. It waits while the server is
// paused.
func (s *Server) Do(args ...string) (any, error) {
	r, ok := s.run(func(sv *server) any { return sv.do(args) })
	if !ok {
		return nil, errClosed
	}
	return goReply(r)
}

// Pause stops the server: commands wait, unanswered, until Resume (or
// their context ends; they still run on Resume, as on a server stopped
// with SIGSTOP). It waits for the command running, if any.
func (s *Server) Pause() {
	s.mu.Lock()
	if s.paused || s.closed {
		s.mu.Unlock()
		return
	}
	s.paused = true
	s.mu.Unlock()
	s.acquire()
}

// Resume ends a Pause.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		s.paused = false
		if !s.closed {
			s.release()
		}
	}
}

// Restart restarts the primary: a new run_id, an uptime from zero, no
// cached scripts, and its data kept (keep: persistence) or lost (a restart
// without persistence: amnesia). Its replicas resynchronise from it, and
// lose what it lost. Subscriptions survive (as if every client
// subscribed again at once).
func (s *Server) Restart(keep bool) {
	s.between(func() {
		s.primary.restart(keep)
		s.resync()
	})
}

// between runs f with s.mu held between two commands: at once when the
// server is paused (no command runs), else once the running one ended.
func (s *Server) between(f func()) {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if !paused {
		if !s.acquire() {
			return
		}
		defer s.release()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// Promote makes r the primary, as a failover does: the data r had
// received becomes the deployment's (writes it had not received are lost),
// its clock the primary's, and the former primary becomes a replica
// (taking r's place) that copies the new primary's data. The promoted
// server reports the former replication ID as master_replid2.
func (s *Server) Promote(r *Replica) {
	s.between(func() {
		if !slices.Contains(s.replicas, r) {
			panic("dlmtest: Promote of a replica of another server")
		}
		old := s.primary
		s.primary, r.sv = r.sv, old
		s.promoted++
		s.primary.replID2, s.primary.replID = old.replID, randomID()
		s.resync()
	})
}

// resync copies the primary's data to every replica (a full sync); s.mu
// is held.
func (s *Server) resync() {
	for _, r := range s.replicas {
		r.sv.data = cloneData(s.primary.data)
		r.pending = nil
		r.acked = s.offset
	}
	s.notifyAcks()
}

func cloneData(d map[string]*value) map[string]*value {
	c := make(map[string]*value, len(d))
	for k, v := range d {
		c[k] = v.clone()
	}
	return c
}

// A write is what one command wrote, as replicated: the values of its
// keys afterwards (nil: deleted).
type write struct {
	offset int64
	at     time.Time // base time it was made
	keys   map[string]*value
}

// replicate sends what the command sv ran wrote to the replicas.
func (s *Server) replicate(sv *server) {
	dirty := sv.dirty
	sv.dirty = nil
	if len(dirty) == 0 {
		return
	}
	w := write{at: time.Now(), keys: make(map[string]*value, len(dirty))}
	for k := range dirty {
		if v := sv.data[k]; v != nil {
			w.keys[k] = v.clone()
		} else {
			w.keys[k] = nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset++
	w.offset = s.offset
	for _, r := range s.replicas {
		r.pending = append(r.pending, w)
		r.catchUp()
	}
}

func (s *Server) notifyAcks() {
	close(s.acked)
	s.acked = make(chan struct{})
}

// wait is WAIT: it returns once n replicas acknowledged offset, or after
// timeout with the number that did. A WAIT whose writes went to a primary
// that has since been replaced fails, as Redis unblocks a WAIT with an
// error when its server becomes a replica: the replicas' offsets then
// count the new primary's writes, not the ones it waited for.
func (s *Server) wait(n int, offset, promoted int64, timeout time.Duration) (int64, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.promoted != promoted {
			s.mu.Unlock()
			return 0, errDemoted
		}
		count, changed := 0, s.acked
		for _, r := range s.replicas {
			if r.acked >= offset {
				count++
			}
		}
		s.mu.Unlock()
		if count >= n {
			return int64(count), nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return int64(count), nil
		case <-s.close:
			return 0, errClosed
		}
	}
}

// errDemoted is Redis' reply to a WAIT whose server became a replica.
var errDemoted = nodekit.Reply(demoted, errors.New(demoted))

const demoted = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"

// A Replica is a replica of a Server's primary. Writes reach it in order,
// after its lag; WAIT counts the replicas that acknowledged a write.
type Replica struct {
	s       *Server
	sv      *server
	lag     time.Duration
	frozen  bool
	pending []write
	acked   int64
	timer   *time.Timer
}

// SetLag makes writes reach the replica d after the primary ran them
// (0: at once, the default).
func (r *Replica) SetLag(d time.Duration) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.lag = d
	if r.timer != nil { // scheduled for the old lag
		r.timer.Stop()
		r.timer = nil
	}
	r.catchUp()
}

// Freeze stops the replica (on) from receiving and acknowledging writes
// until it is thawed (off): it stays connected, so connected_slaves still
// counts it, as a replica stopped with SIGSTOP.
func (r *Replica) Freeze(on bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.frozen = on
	r.catchUp()
}

// Clock returns the replica's clock, which it keeps when promoted.
func (r *Replica) Clock() *Clock {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.sv.clock
}

// Get returns the string key holds on the replica, as a read on it would.
func (r *Replica) Get(key string) (string, bool) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	v := r.sv.data[key]
	if v == nil || v.kind != kindString || v.expireAt != 0 && r.sv.nowMS() >= v.expireAt {
		return "", false
	}
	return v.str, true
}

// catchUp applies the writes whose lag has passed, and schedules the
// next; r.s.mu is held.
func (r *Replica) catchUp() {
	if r.frozen {
		return
	}
	now := time.Now()
	applied := 0
	for _, w := range r.pending {
		if now.Sub(w.at) < r.lag {
			break
		}
		for k, v := range w.keys {
			if v == nil {
				delete(r.sv.data, k)
			} else {
				r.sv.data[k] = v.clone()
			}
		}
		r.acked = w.offset
		applied++
	}
	r.pending = r.pending[applied:]
	if applied > 0 {
		r.s.notifyAcks()
	}
	if len(r.pending) > 0 && r.timer == nil {
		r.timer = time.AfterFunc(r.lag-now.Sub(r.pending[0].at), func() {
			r.s.mu.Lock()
			defer r.s.mu.Unlock()
			r.timer = nil
			r.catchUp()
		})
	}
}

// linkFaults are the faults of a link between clients and the server: a
// Node's own, or the Server's, which every Node meets.
type linkFaults struct {
	delay time.Duration // every reply is held this long
	drop  int           // the next drop replies are lost
	slow  time.Duration // (server only) every command holds the server this long
	cut   bool          // (node only) partitioned: requests and replies lost
}

// SetDelay holds every reply of the server for d before it reaches its
// Node (0: none). Commands run at once; only their replies are late.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.link.delay = d
}

// DropReplies loses the replies of the next n commands the server runs,
// whichever Node sent them: the commands run, and their calls end with
// their context, as calls whose replies were lost.
func (s *Server) DropReplies(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.link.drop = n
}

// SetSlow makes every command hold the server for d before it runs (0:
// none), so that commands queue behind each other as on a slow server.
func (s *Server) SetSlow(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.link.slow = d
}

// numsub counts the subscriptions of channel (ordinary or shard).
func (s *Server) numsub(channel string, shard bool) int64 {
	if shard {
		return 0 // Nodes subscribe on ordinary channels
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.subs[channel]))
}

// publish delivers message to channel's subscribers (PUBLISH), or to none
// (SPUBLISH: Nodes subscribe on ordinary channels, as on a server that is
// not a Cluster node).
func (sv *server) publish(channel, message string, shard bool) any {
	if shard {
		return int64(0)
	}
	s := sv.owner
	s.mu.Lock()
	defer s.mu.Unlock()
	subs := s.subs[channel]
	for sub := range subs {
		sub.node.mu.Lock()
		f, faults := sub.node.link, sub.node.faults
		sub.node.mu.Unlock()
		if f.cut {
			continue
		}
		d := f.delay + s.link.delay
		if faults != nil {
			fault := faults(true)
			if fault.Drop {
				continue
			}
			d += fault.Delay
		}
		if d > 0 {
			time.AfterFunc(d, func() { sub.push(message) })
		} else {
			sub.push(message)
		}
	}
	return int64(len(subs))
}

// infoSection writes one INFO section.
func (sv *server) infoSection(b *strings.Builder, section string) {
	s := sv.owner
	line := func(format string, args ...any) { fmt.Fprintf(b, format+"\r\n", args...) }
	switch section {
	case "server":
		line("# Server")
		line("redis_version:%s", redisVersion)
		line("redis_mode:standalone")
		line("run_id:%s", sv.runID)
		line("uptime_in_seconds:%d", int64(sv.clock.Now().Sub(sv.started)/time.Second))
	case "replication":
		s.mu.Lock()
		line("# Replication")
		if sv == s.primary {
			line("role:master")
			line("connected_slaves:%d", len(s.replicas))
			for i, r := range s.replicas {
				line("slave%d:ip=127.0.0.1,port=%d,state=online,offset=%d,lag=0", i, 7000+i, r.acked)
			}
		} else {
			line("role:slave")
		}
		line("master_replid:%s", sv.replID)
		line("master_replid2:%s", sv.replID2)
		line("master_repl_offset:%d", s.offset)
		s.mu.Unlock()
	case "persistence":
		line("# Persistence")
		line("loading:0")
		line("aof_enabled:0")
		line("aof_rewrite_in_progress:0")
		line("aof_rewrite_scheduled:0")
	case "stats":
		line("# Stats")
		line("evicted_keys:0")
		line("expired_keys:0")
	case "commandstats":
		line("# Commandstats")
		names := make([]string, 0, len(sv.stats))
		for n := range sv.stats {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			line("cmdstat_%s:calls=%d,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0", n, sv.stats[n])
		}
	case "cluster":
		line("# Cluster")
		line("cluster_enabled:0")
	case "keyspace":
		line("# Keyspace")
		if n := len(sv.data); n > 0 {
			line("db0:keys=%d,expires=0,avg_ttl=0", n)
		}
	}
	b.WriteString("\r\n")
}
