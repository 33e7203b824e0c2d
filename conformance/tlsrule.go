package conformance

import (
	"context"
	"slices"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
)

// testTLS dials, with the driver's TLS dial (harness.WithTLS), a server
// the harness starts that speaks TLS only: trusting a CA that did not sign
// the server's certificate, the dial or the first call must fail with an
// error dlm.Permanent reports true (a client that skips verification,
// InsecureSkipVerify, gets a reply); trusting the right CA, calls work.
func testTLS(t *testing.T, c *nodeCase) {
	if c.tr.DialTLS == nil || c.tr.TLSServer == nil {
		t.Skip("the driver's TLS dial was not given: run the suite with harness.WithTLS to check that it verifies the server's certificate")
	}
	addr, right, wrong := c.tr.TLSServer(t)
	src := c.script("return {7}")
	keys := []string{c.key("k")}
	run := func(n driver.Node) driver.Call {
		calls := []driver.Call{{Source: src, Keys: keys}}
		cx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		n.Run(cx, calls)
		settled(t, "Run", calls)
		return calls[0]
	}
	// The wrong CA.
	n, err := c.tr.DialTLS(t, addr, wrong)
	if err == nil {
		if n == nil {
			t.Fatal("the TLS dial returned nil and no error")
		}
		cl := run(n)
		if cl.Err == nil {
			t.Fatalf("a node dialled over TLS trusting a CA that did not sign the server's certificate got reply %s: the driver does not verify the server's certificate (InsecureSkipVerify?), so anyone on the path can pose as the server", ints(cl.Reply))
		}
		err = cl.Err
	}
	if !dlm.Permanent(err) {
		t.Errorf("a node dialled over TLS trusting a CA that did not sign the server's certificate failed with %v, which dlm.Permanent reports false: a certificate that does not verify will not verify on a retry, and Lock would wait out its timeout (report it as permanent: nodekit.Dialer does)", err)
	}
	// The right CA.
	n, err = c.tr.DialTLS(t, addr, right)
	if err != nil {
		t.Fatalf("the TLS dial with the CA that signed the server's certificate: %v", err)
	}
	if n == nil {
		t.Fatal("the TLS dial returned nil and no error")
	}
	if cl := run(n); cl.Err != nil || !slices.Equal(cl.Reply, []int64{7}) {
		t.Errorf("a node dialled over TLS trusting the CA that signed the server's certificate: reply %s, error %v; want [7]", ints(cl.Reply), cl.Err)
	}
}
