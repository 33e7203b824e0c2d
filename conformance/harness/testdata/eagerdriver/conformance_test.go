package eagerdriver

import (
	"crypto/tls"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/harness"
)

// poolSize is how many connections New dials before the first call.
const poolSize = 16

// dialErr is the driver's dial, whose error is New's: a client that
// connects when it is made fails to be made where nothing listens.
func dialErr(t *testing.T, addr string) (driver.Node, error) {
	d, err := New(addr, poolSize)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, nil
}

// dialTLS is the driver's dial over TLS, for the TLS rule.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) (driver.Node, error) {
	d, err := NewTLS(addr, poolSize, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, nil
}

func dial(t *testing.T, addr string) driver.Node {
	n, err := dialErr(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The PermanentErrors rule dials servers that refuse connections: with
// harness.WithDial the driver's dial may fail there, as New does, the
// error standing for every call's.

// TestRun is the first layout of docs/driver-contract.md: every rule on
// the harness's server.
func TestRun(t *testing.T) {
	t.Parallel() // the harness's servers are its own
	harness.Run(t, dial, harness.WithDial(dialErr), harness.WithTLS(dialTLS))
}

// TestOwn is the second: the rules that need the suite to own the server
// on the harness's, every other rule on a server of the author's (here
// one more the harness starts, with no fault point in front of it).
func TestOwn(t *testing.T) {
	t.Parallel() // the harness's servers are its own
	harness.Own(t, dial, harness.WithDial(dialErr), harness.WithTLS(dialTLS))
	mine := harness.StartServer(t)
	conformance.RunNode(t, func(t *testing.T) driver.Node { return dial(t, mine) })
}
