package nodekit_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
)

// serve accepts connections on l and hands each to handle until the test
// ends.
func serve(t *testing.T, l net.Listener, handle func(net.Conn)) string {
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return l.Addr().String()
}

// Dialer reports a TLS problem as a permanent *TLSError and leaves the
// network's problems transient.
func TestDialerClassifies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	certs := redistest.NewCerts(t)
	cert, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	require.NoError(t, err)
	tl, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	// A TLS server that answers PING, or closes when the handshake fails.
	tlsAddr := serve(t, tl, func(c net.Conn) {
		b := make([]byte, 64)
		if _, err := c.Read(b); err == nil {
			_, _ = c.Write([]byte("+PONG\r\n"))
		}
	})
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	plainAddr := serve(t, pl, func(c net.Conn) {
		b := make([]byte, 64)
		if _, err := c.Read(b); err == nil {
			_, _ = c.Write([]byte("-ERR unknown command\r\n"))
		}
	})
	closedAddr := redistest.RefusedAddr(t)

	roundTrip := func(cfg *tls.Config, addr string) error {
		c, err := nodekit.Dialer(cfg, time.Second)(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err == nil && string(b[:n]) != "+PONG\r\n" {
			return errors.New("reply " + string(b[:n]))
		}
		return err
	}
	good := certs.ClientConfig()
	assert.NoError(t, roundTrip(good, tlsAddr))

	wrong := redistest.NewCerts(t).ClientConfig()
	for name, tc := range map[string]struct {
		cfg  *tls.Config
		addr string
		says string
	}{
		"wrong CA":           {wrong, tlsAddr, "certificate signed by unknown authority"},
		"other name":         {&tls.Config{RootCAs: good.RootCAs, ServerName: "redis.example"}, tlsAddr, "not redis.example"},
		"TLS client, no TLS": {good, plainAddr, "first record does not look like a TLS handshake"},
		"plain client, TLS":  {nil, tlsAddr, "the server speaks TLS and this client does not"},
	} {
		err := roundTrip(tc.cfg, tc.addr)
		var te *nodekit.TLSError
		require.ErrorAs(t, err, &te, name)
		assert.True(t, dlm.Permanent(err), name)
		assert.Contains(t, err.Error(), tc.says, name)
	}

	// The network's problems stay transient: a closed port, and a plain
	// server that closes the connection without a word.
	for name, addr := range map[string]string{"closed port": closedAddr} {
		for _, cfg := range []*tls.Config{nil, good} {
			err := roundTrip(cfg, addr)
			require.Error(t, err, name)
			assert.False(t, errors.As(err, new(*nodekit.TLSError)), "%s: %v", name, err)
			assert.False(t, dlm.Permanent(err), name)
		}
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hangup := serve(t, hl, func(c net.Conn) { _, _ = c.Read(make([]byte, 64)) })
	err = roundTrip(nil, hangup)
	require.ErrorIs(t, err, io.EOF)
	assert.False(t, dlm.Permanent(err))
}

// A TLS client at a real Redis server's plain port is told so before its
// context ends, with a permanent *TLSError: the server, which takes the
// client's hello for the start of an inline command and waits for the
// rest, never answers the handshake by itself.
func TestDialTLSToPlainRedis(t *testing.T) {
	t.Parallel() // owns its servers
	srv := redistest.Start(t)
	pw := redistest.Start(t, "--requirepass", "secret") // answers PING with -NOAUTH
	for _, addr := range []string{srv.Addr, pw.Addr} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		conn, err := nodekit.Dialer(&tls.Config{InsecureSkipVerify: true}, 0)(ctx, "tcp", addr)
		require.NoError(t, ctx.Err(), "the handshake waited out its context")
		cancel()
		if conn != nil {
			conn.Close()
		}
		var te *nodekit.TLSError
		require.ErrorAs(t, err, &te)
		assert.True(t, dlm.Permanent(err))
		assert.Contains(t, err.Error(), "TLS with "+addr+": the server does not speak TLS")
	}
	// A TLS server is not mistaken for a plain one, even when the
	// handshake is slow enough to probe it. The server's replies are held
	// back far longer than probeAfter (250ms), so that the probe is made
	// however late a loaded machine runs its timer (with 400ms, the
	// server's hello arrived first under load, and no probe was made).
	certs := redistest.NewCerts(t)
	tlsSrv := redistest.StartTLS(t, certs)
	proxy := redistest.StartProxy(t, tlsSrv.Addr)
	proxy.SetDelay(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := nodekit.Dialer(certs.ClientConfig(), 0)(ctx, "tcp", proxy.Addr)
	require.NoError(t, err)
	conn.Close()
	assert.Equal(t, int64(2), proxy.Accepted(), "the handshake and the probe")
}
