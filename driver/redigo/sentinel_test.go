package redigo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// A pool that dials through Sentinels.Dial follows the primary across a
// failover: after the primary is killed and Sentinel promotes a replica,
// new connections go to the promoted server and locking works there.
func TestSentinelsDial(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 2, Sentinels: 3})
	ctx := context.Background()
	// The first address answers nothing: the next Sentinel is asked.
	sentinels := append([]string{"127.0.0.1:1"}, topo.SentinelAddrs()...)
	pool := &redis.Pool{
		MaxIdle:     8,
		DialContext: redigo.Sentinels{Addrs: sentinels, Master: topo.Master}.Dial(redis.DialReadTimeout(5 * time.Second)),
		TestOnBorrow: func(c redis.Conn, idleSince time.Time) error {
			if time.Since(idleSince) < time.Second {
				return nil
			}
			return redigo.CheckPrimary(c)
		},
	}
	t.Cleanup(func() { _ = pool.Close() })
	node := redigo.New(pool).WithName(topo.Master)
	s, err := strategy.NewSingle(node, strategy.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlm.New(s, dlm.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	port := func() string {
		t.Helper()
		c, err := pool.GetContext(ctx)
		if err != nil {
			t.Fatalf("GetContext: %v", err)
		}
		defer c.Close()
		info, err := redis.String(c.Do("INFO", "server"))
		if err != nil {
			t.Fatalf("INFO: %v", err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if p, ok := strings.CutPrefix(l, "tcp_port:"); ok {
				return p
			}
		}
		t.Fatal("INFO server has no tcp_port")
		return ""
	}
	if p, want := port(), topo.Primary.Addr; !strings.HasSuffix(want, ":"+p) {
		t.Fatalf("a pooled connection went to port %s, want the primary %s", p, want)
	}
	if _, err := m.TryLock(ctx, "before"); err != nil {
		t.Fatalf("TryLock on the first primary: %v", err)
	}

	old := topo.Primary
	old.Kill(t)
	promoted := topo.WaitFailover(t, old, 30*time.Second)
	t.Logf("Sentinel promoted %s", promoted.Addr)

	// Pooled connections to the killed server fail and are discarded; new
	// ones go to the promoted server.
	var lock *dlm.Lock
	deadline := time.Now().Add(30 * time.Second)
	for {
		lock, err = m.TryLock(ctx, "after")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("TryLock after the failover: %v", err)
	}
	if p := port(); !strings.HasSuffix(promoted.Addr, ":"+p) {
		t.Fatalf("after the failover a pooled connection went to port %s, want the promoted %s", p, promoted.Addr)
	}
	if n, err := promoted.Client(t).Exists(ctx, "dlm:{after}").Result(); err != nil || n != 1 {
		t.Fatalf("the lock taken after the failover is not on the promoted server: EXISTS %d, %v", n, err)
	}
	if _, err := m.TryLock(ctx, "after"); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("a second TryLock of a held key on the promoted server: %v, want ErrNotAcquired", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("Unlock on the promoted server: %v", err)
	}

	// The failover strategy over the same pool: once Sentinel has made the
	// remaining replica follow the promoted server, locks are granted with
	// its acknowledgement.
	f, err := strategy.NewFailover(node, strategy.WithAcks(strategy.AckAll()), strategy.WithReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err = f.Acquire(ctx, "failover", "tok", time.Minute)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Failover.Acquire after the failover: %v", err)
	}
	for _, r := range topo.Replicas {
		if r == promoted {
			continue
		}
		if v := get(t, r.Addr, "dlm:{failover}"); !strings.HasSuffix(v, ":tok") {
			t.Errorf("the replica %s of the promoted server has %q, want the acknowledged lock", r.Addr, v)
		}
	}
}

func TestSentinelsDialFails(t *testing.T) {
	srv := redistest.Start(t, "--repl-diskless-sync-delay", "0") // a plain server: not a Sentinel
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := (redigo.Sentinels{Master: "m"}).Dial()(ctx); err == nil {
		c.Close()
		t.Fatal("Sentinels.Dial with no Sentinels dialled")
	}
	_, err := redigo.Sentinels{Addrs: []string{"127.0.0.1:1", srv.Addr}, Master: "m"}.Dial()(ctx)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("Sentinels.Dial with no working Sentinel: %v, want an error naming each", err)
	}
	c, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := redigo.CheckPrimary(c); err != nil {
		t.Fatalf("CheckPrimary on a standalone server: %v", err)
	}
	replica := redistest.Start(t)
	replica.ReplicaOf(t, srv)
	rc, err := redis.Dial("tcp", replica.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := redigo.CheckPrimary(rc); err == nil || !strings.Contains(err.Error(), "slave") {
		t.Fatalf("CheckPrimary on a replica: %v, want an error naming its role", err)
	}
}

// Sentinels with requirepass: Sentinels.Dial authenticates with its
// DialOptions; without them every Sentinel refuses, and the error says so.
func TestSentinelsWithPassword(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1, Sentinels: 1, SentinelPassword: "s3ntinel"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := redigo.Sentinels{Addrs: topo.SentinelAddrs(), Master: topo.Master}
	if c, err := s.Dial()(ctx); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialling without the Sentinels' password: %v, want a NOAUTH error", err)
	}
	s.DialOptions = []redis.DialOption{redis.DialPassword("s3ntinel")}
	c, err := s.Dial()(ctx)
	if err != nil {
		t.Fatalf("dialling with the Sentinels' password: %v", err)
	}
	defer c.Close()
	if v, err := redis.String(c.Do("SET", "k", "v")); err != nil || v != "OK" {
		t.Fatalf("SET on the primary found through the Sentinels: %q %v", v, err)
	}
	if v := get(t, topo.Primary.Addr, "k"); v != "v" {
		t.Fatalf("the primary %s has %q, want the value written through the dialled connection", topo.Primary.Addr, v)
	}
}
