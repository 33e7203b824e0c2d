package redistest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback address where connections are refused,
// for as long as t runs. Its port is held by a socket bound without
// listening (and without SO_REUSEADDR): a port merely found free and
// released would go, within the same run, to the next server another test
// starts (seen: the conformance suite's "connection refused" reached a
// Sentinel), and with it every dial meant to be refused.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("redistest: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("redistest: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("redistest: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
