package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Replicated is a primary with replicas, watched by Sentinels when it was
// started with any.
type Replicated struct {
	Master    string // the name Sentinels know the primary by
	Primary   *Server
	Replicas  []*Server
	Sentinels []*Sentinel
}

// ReplicatedOptions configures StartReplicated. Zero fields take the
// defaults noted.
type ReplicatedOptions struct {
	Replicas        int           // replicas of the primary; default 2
	Sentinels       int           // redis-sentinel processes; 0 starts none
	Quorum          int           // Sentinels that must agree the primary is down; default a majority
	DownAfter       time.Duration // Sentinel down-after-milliseconds; default 1s
	FailoverTimeout time.Duration // Sentinel failover-timeout; default 5s
	Master          string        // master name; default "dlm-primary"
	// SentinelPassword, when set, is the Sentinels' requirepass: clients
	// must authenticate to them (the Sentinels use it among themselves).
	SentinelPassword string
	// TLS, when set, makes every server and Sentinel speak TLS only, with
	// these certificates, and replicate and monitor over TLS.
	TLS *Certs
}

// StartReplicated starts a primary, its replicas (each replicating before it
// returns) and Sentinels that monitor the primary, and waits until every
// Sentinel knows every replica and every other Sentinel, so that a failover
// can start as soon as the primary is down. Everything stops when the test
// ends.
func StartReplicated(t testing.TB, o ReplicatedOptions) *Replicated {
	t.Helper()
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.Quorum == 0 {
		o.Quorum = o.Sentinels/2 + 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = time.Second
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = 5 * time.Second
	}
	if o.Master == "" {
		o.Master = "dlm-primary"
	}
	// Without the delay a primary waits 5s for more replicas before a
	// diskless full sync; any server may become the primary.
	args := []string{"--repl-diskless-sync-delay", "0"}
	start := func() *Server {
		if o.TLS != nil {
			return StartTLS(t, o.TLS, args...)
		}
		return Start(t, args...)
	}
	r := &Replicated{Master: o.Master, Primary: start()}
	for range o.Replicas {
		s := start()
		s.ReplicaOf(t, r.Primary)
		r.Replicas = append(r.Replicas, s)
	}
	// A replica's link is up, and the primary lists it online, before the
	// primary streams writes to it: after a diskless full sync the stream
	// starts with the replica's first REPLCONF ACK, up to a second later,
	// and until then WAIT cannot count it. Wait until a write is acknowledged
	// by every replica.
	waitFor(t, 10*time.Second, "every replica to acknowledge a write", func() bool {
		return r.Primary.acked(o.Replicas)
	})
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n",
		o.Master, r.Primary.Port, o.Quorum, o.DownAfter.Milliseconds(), o.FailoverTimeout.Milliseconds())
	if o.SentinelPassword != "" {
		conf += fmt.Sprintf("requirepass %q\n", o.SentinelPassword)
	}
	for range o.Sentinels {
		s := &Server{bin: Binary(t, "redis-sentinel"), dir: t.TempDir(), conf: conf, certs: o.TLS}
		r.Sentinels = append(r.Sentinels, &Sentinel{Server: launch(t, s), password: o.SentinelPassword})
	}
	if len(r.Sentinels) > 0 {
		want := map[string]string{"num-slaves": strconv.Itoa(o.Replicas), "num-other-sentinels": strconv.Itoa(o.Sentinels - 1)}
		waitFor(t, 30*time.Second, "Sentinels to discover the replicas and each other", func() bool {
			for _, s := range r.Sentinels {
				m, err := s.masterState(o.Master)
				if err != nil {
					return false
				}
				for k, v := range want {
					if m[k] != v {
						return false
					}
				}
			}
			return true
		})
	}
	return r
}

// SentinelAddrs returns the Sentinels' addresses, for redis.FailoverOptions.
func (r *Replicated) SentinelAddrs() []string {
	a := make([]string, len(r.Sentinels))
	for i, s := range r.Sentinels {
		a[i] = s.Addr
	}
	return a
}

// Server returns the server of the topology listening on addr, or nil.
func (r *Replicated) Server(addr string) *Server {
	for _, s := range append([]*Server{r.Primary}, r.Replicas...) {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// WaitFailover waits until every Sentinel names a primary other than old and
// that server reports role:master, and returns it.
func (r *Replicated) WaitFailover(t testing.TB, old *Server, timeout time.Duration) *Server {
	t.Helper()
	var promoted *Server
	waitFor(t, timeout, "Sentinels to promote a replica of "+old.Addr, func() bool {
		addr := ""
		for _, s := range r.Sentinels {
			a, err := s.masterAddr(r.Master)
			if err != nil || a == old.Addr || addr != "" && a != addr {
				return false
			}
			addr = a
		}
		promoted = r.Server(addr)
		return promoted != nil && promoted.role() == "master"
	})
	return promoted
}

// masterAddr asks the Sentinel for the current address of the named primary.
func (s *Sentinel) masterAddr(master string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: s.password, TLSConfig: s.TLS(), DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	a, err := c.GetMasterAddrByName(context.Background(), master).Result()
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("SENTINEL get-master-addr-by-name: %v", a)
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// masterState returns the Sentinel's view of the named primary.
func (s *Sentinel) masterState(master string) (map[string]string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: s.password, TLSConfig: s.TLS(), DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	return c.Master(context.Background(), master).Result()
}

// acked writes a scratch key and reports whether n replicas acknowledged it
// within 100ms.
func (s *Server) acked(n int) bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	ctx := context.Background()
	var wait *redis.IntCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "redistest:replicated")
		wait = redis.NewIntCmd(ctx, "WAIT", n, 100)
		return p.Process(ctx, wait)
	})
	return err == nil && wait.Val() >= int64(n)
}

// role returns the server's role from INFO replication ("master", "slave"),
// or "" when it does not answer.
func (s *Server) role() string {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return v
		}
	}
	return ""
}
