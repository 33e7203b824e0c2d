package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
)

// Strategy rules with faults injected through the FaultyNode wrappers.

func faultTolerated(fault Fault) func(t *testing.T, c *strategyCase) {
	return func(t *testing.T, c *strategyCase) {
		f := c.tolerated()
		if f == 0 {
			t.Skipf("a quorum of %d of %d nodes tolerates no %s node", c.quorum, len(c.faulty), fault)
		}
		k := c.key("k")
		c.inject(f, fault)
		c.acquire(t, k, "A", ttl)
		c.refused(t, k, "B", ttl, fmt.Sprintf("while A holds it, with %d nodes %s", f, fault))
		if _, err := c.Extend(ctx(t), k, "A", ttl); err != nil {
			t.Errorf("Extend with %d of %d nodes %s: %v", f, len(c.faulty), fault, err)
		}
		_ = c.Release(ctx(t), k, "A") // a node that lost the reply may make it report an error
		c.inject(0, Fault{})
		c.acquire(t, k, "B", ttl) // released everywhere, the nodes that had faults included
	}
}

func faultBeyondQuorum(fault Fault) func(t *testing.T, c *strategyCase) {
	return func(t *testing.T, c *strategyCase) {
		k := c.key("k")
		n := c.tolerated() + 1
		c.inject(n, fault)
		c.refused(t, k, "A", ttl, fmt.Sprintf("with %d of %d nodes %s (quorum %d)", n, len(c.faulty), fault, c.quorum))
		c.inject(0, Fault{})
		c.acquireSettled(t, k, "B", fmt.Sprintf("after A was refused with %d nodes %s and the nodes recovered", n, fault))
	}
}

func testSlowBeyondDeadline(t *testing.T, c *strategyCase) {
	const deadline = 200 * time.Millisecond
	k := c.key("k")
	n := c.tolerated() + 1
	c.inject(n, Fault{Delay: 30 * time.Second})
	cx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(cx, k, "A", ttl)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("Acquire with %d of %d nodes slower than its %v deadline granted %+v", n, len(c.faulty), deadline, l)
	}
	if !errors.Is(err, dlm.ErrNotAcquired) {
		t.Errorf("Acquire with too many slow nodes: error %v does not match dlm.ErrNotAcquired", err)
	}
	// A strategy may spend a bounded cleanup after the deadline.
	if took > deadline+3*time.Second {
		t.Errorf("Acquire with a %v deadline returned after %v", deadline, took.Round(time.Millisecond))
	}
	c.inject(0, Fault{})
	c.acquireSettled(t, k, "B", "after A was refused with slow nodes and the nodes recovered")
}

func testSlowLease(t *testing.T, c *strategyCase) {
	const delay = 300 * time.Millisecond
	c.inject(len(c.faulty), Fault{Delay: delay})
	before := time.Now()
	l := c.acquire(t, c.key("k"), "A", ttl)
	if limit := before.Add(ttl); l.Until.After(limit) {
		t.Errorf("with every node %v slow, Until is %v past the request's start plus the TTL: the lease must count from before the request", delay, l.Until.Sub(limit))
	}
	if !l.Until.After(time.Now()) {
		t.Error("the lease granted is already over")
	}
}
