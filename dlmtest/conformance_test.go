package dlmtest_test

import (
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/dlmtest"
)

// TestConformance runs the driver conformance suite over Nodes of one
// Server, in real time (its rules stall the server with busy scripts and
// time the calls). The rules that need the suite to own a redis-server
// process and the path to it skip.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite stalls the server for seconds at a time")
	}
	srv := dlmtest.NewServer()
	t.Cleanup(srv.Close)
	conformance.RunNode(t, func(t *testing.T) driver.Node { return srv.Node() })
}
