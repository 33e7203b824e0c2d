package nodekit

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlmgo/dlm/internal/errs"
)

// A TLSError is a connection that failed for a reason of TLS: a server
// certificate that does not verify (unknown authority, expired, another
// name), a client certificate the server refused, a TLS client at a port
// that does not speak TLS, or a plain client at one that does. Trying again
// does not help, so Permanent reports true and dlm.Permanent with it.
type TLSError struct {
	Addr string
	Err  error
}

func (e *TLSError) Error() string {
	return "dlm: TLS with " + e.Addr + ": " + errs.Cause(e.Err)
}

func (e *TLSError) Unwrap() error { return e.Err }

// Permanent reports true: see dlm.Permanent.
func (e *TLSError) Permanent() bool { return true }

// errPlainToTLS is what a plain client is told when the server speaks TLS.
var errPlainToTLS = errors.New("dlm: the server speaks TLS and this client does not: set tls=true (and tls_ca)")

// Dialer returns a dial function for a client library that calls Dial
// with a net.Dialer whose Timeout is timeout (0: ctx alone).
func Dialer(cfg *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return Dial(ctx, d, cfg, network, addr)
	}
}

// Dial connects to addr with d within ctx, then, when cfg is not nil, makes
// a TLS handshake with cfg (ServerName set to the host of addr when cfg's
// is empty) within ctx and d.Timeout. A handshake that fails for a reason
// of TLS returns a *TLSError, and so does one at a port that answers plain
// text: a handshake that hears nothing for a while (probeAfter, or half of
// its time when that is shorter) makes Dial send a plain-text PING over a
// second connection, and a RESP reply to it ends the handshake. A plain connection (cfg nil) whose first read
// finds the server speaking TLS (a TLS record, or the connection closed by
// a server that answers a TLS handshake) fails that read and every later
// one with a *TLSError too, and so does a TLS connection whose first read
// gets an alert (a server refusing the client's certificate says so only
// after the handshake, in TLS 1.3).
func Dial(ctx context.Context, d *net.Dialer, cfg *tls.Config, network, addr string) (net.Conn, error) {
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return &plainConn{Conn: conn, addr: addr}, nil
	}
	c := cfg
	if c.ServerName == "" {
		c = cfg.Clone()
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	heard := &hearing{Conn: conn}
	tc := tls.Client(heard, c)
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	hctx, cancel := context.WithCancelCause(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		probeDuringHandshake(hctx, cancel, heard, d, network, addr)
	}()
	err = tc.HandshakeContext(hctx)
	plain := errors.Is(context.Cause(hctx), errTLSToPlain)
	cancel(nil)
	<-probed
	if err != nil {
		_ = conn.Close()
		if plain {
			return nil, &TLSError{Addr: addr, Err: errTLSToPlain}
		}
		if tlsProblem(err) {
			return nil, &TLSError{Addr: addr, Err: err}
		}
		return nil, err
	}
	return &tlsConn{Conn: tc, addr: addr}, nil
}

// errTLSToPlain is what a TLS client is told when the server answers in
// plain text.
var errTLSToPlain = errors.New("dlm: the server does not speak TLS (it answers plain-text commands) and this client does: drop tls=true, or give the server's TLS port")

// probeAfter is how long a TLS handshake may go without a byte from the
// server before Dial asks the port, over a second connection and in plain
// text, whether it is a Redis server that does not speak TLS (or half the
// time the handshake has left, when that is shorter).
const probeAfter = 250 * time.Millisecond

// probeDuringHandshake waits until the handshake on heard has gone
// probeAfter (or half of what ctx leaves it) without a byte from the
// server, then asks addr for a plain-text PING; if a RESP reply comes
// while the handshake still has heard nothing, it cancels ctx with
// errTLSToPlain as the cause. A Redis server that does not speak TLS takes
// the client's hello for the start of an inline command and waits for the
// rest of it, silent, so the handshake alone would wait out its deadline.
// A TLS port never answers the PING with a RESP line, so a slow TLS server
// costs one extra connection and no false verdict. It returns when ctx
// ends (the handshake cancels it when it returns).
func probeDuringHandshake(ctx context.Context, cancel context.CancelCauseFunc, heard *hearing, d *net.Dialer, network, addr string) {
	delay := probeAfter
	if dl, ok := ctx.Deadline(); ok {
		delay = min(delay, time.Until(dl)/2)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	if heard.heard.Load() || !answersPlainRESP(ctx, d, network, addr) || heard.heard.Load() {
		return
	}
	cancel(errTLSToPlain)
}

// answersPlainRESP reports whether addr answers a plain-text PING, within
// ctx, with a RESP simple string or error line (+PONG, or -NOAUTH and the
// like from a server that wants a password first).
func answersPlainRESP(ctx context.Context, d *net.Dialer, network, addr string) bool {
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReaderSize(io.LimitReader(conn, 512), 512).ReadString('\n')
	return err == nil && len(line) >= 3 && (line[0] == '+' || line[0] == '-') && strings.HasSuffix(line, "\r\n")
}

// hearing is a connection that notes whether a byte was ever read from it.
type hearing struct {
	net.Conn
	heard atomic.Bool
}

func (h *hearing) Read(b []byte) (int, error) {
	n, err := h.Conn.Read(b)
	if n > 0 && !h.heard.Load() {
		h.heard.Store(true)
	}
	return n, err
}

// tlsProblem reports whether a handshake error is about TLS itself, not
// the network: a certificate that does not verify, an alert the server
// sent (it refused the client's certificate, or found no common version),
// or a reply that is not TLS.
func tlsProblem(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		rh tls.RecordHeaderError
		ua x509.UnknownAuthorityError
		ci x509.CertificateInvalidError
		hn x509.HostnameError
		ne net.Error
	)
	switch {
	case errors.As(err, &cv), errors.As(err, &rh), errors.As(err, &ua), errors.As(err, &ci), errors.As(err, &hn), remoteAlert(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	return true // crypto/tls's own protocol errors
}

// remoteAlert reports whether err is an alert the peer sent (crypto/tls
// returns it as a *net.OpError with Op "remote error").
func remoteAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// outer wraps a *TLSError that a read returns: go-redis takes one wrapper
// off the errors of its connection handshake, which would otherwise leave
// the TLSError's cause without it.
type outer struct{ err *TLSError }

func (o outer) Error() string { return o.err.Error() }
func (o outer) Unwrap() error { return o.err }

// tlsConn is a TLS connection whose first read reports an alert (a server
// that refuses the client's certificate says so only after the handshake,
// in TLS 1.3) as a *TLSError, and so does every later read (a client
// library may ignore the failure of its handshake's first command).
type tlsConn struct {
	net.Conn
	addr    string
	checked bool  // only the first read is checked; reads are not concurrent
	err     error // the *TLSError every read returns once found
}

func (c *tlsConn) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(b)
	if !c.checked {
		c.checked = true
		if n == 0 && err != nil && remoteAlert(err) {
			c.err = outer{&TLSError{Addr: c.addr, Err: err}}
			return 0, c.err
		}
	}
	return n, err
}

// ConnectionState returns the TLS connection's state (its version, the
// certificates the server presented).
func (c *tlsConn) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}

// plainConn is a plain connection that checks its first read for a server
// that speaks TLS; once found, every read fails with that error (a client
// library may ignore the failure of its handshake's first command).
type plainConn struct {
	net.Conn
	addr     string
	checked  bool         // only the first read is checked; reads are not concurrent
	err      error        // the *TLSError every read returns once found
	deadline atomic.Int64 // the read deadline in Unix nanoseconds (0: none), which bounds the probe too
}

func (c *plainConn) SetDeadline(t time.Time) error {
	c.setDeadline(t)
	return c.Conn.SetDeadline(t)
}

func (c *plainConn) SetReadDeadline(t time.Time) error {
	c.setDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *plainConn) setDeadline(t time.Time) {
	if t.IsZero() {
		c.deadline.Store(0)
	} else {
		c.deadline.Store(t.UnixNano())
	}
}

func (c *plainConn) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(b)
	if c.checked {
		return n, err
	}
	c.checked = true
	switch {
	case n >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03: // a TLS alert or handshake record
		c.err = outer{&TLSError{Addr: c.addr, Err: errPlainToTLS}}
	case n == 0 && err != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && speaksTLS(c.addr, c.deadline.Load()):
		c.err = outer{&TLSError{Addr: c.addr, Err: fmt.Errorf("%w (%v)", errPlainToTLS, err)}}
	default:
		return n, err
	}
	return 0, c.err
}

// SyscallConn lets a client library check the connection's health.
func (c *plainConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("dlm: nodekit: not a syscall.Conn")
}

// speaksTLS reports whether the server at addr answers a TLS handshake
// within a second and before deadlineNano (unless it is 0): it explains a
// plain connection the server closed at the first command.
func speaksTLS(addr string, deadlineNano int64) bool {
	deadline := time.Now().Add(time.Second)
	if d := time.Unix(0, deadlineNano); deadlineNano != 0 && d.Before(deadline) {
		deadline = d
	}
	d := &net.Dialer{Deadline: deadline}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	host, _, _ := net.SplitHostPort(addr)
	// Only asks whether the port speaks TLS: nothing is sent over it.
	err = tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: host}).Handshake()
	return err == nil || remoteAlert(err)
}
