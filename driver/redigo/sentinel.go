package redigo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// sentinelTimeout bounds each step of asking one Sentinel.
const sentinelTimeout = time.Second

// SentinelDial returns a function for redis.Pool.DialContext that connects
// to the current primary of the named master: it asks the Sentinels, in
// turn, for the primary's address (SENTINEL GET-MASTER-ADDR-BY-NAME),
// dials it with opts, and hands the connection out only once the server
// answers ROLE with "master". A Sentinel that does not answer, does not know
// master, or names a server that is not a primary (yet) is skipped for the
// next; the Sentinel that answered last is asked first next time. When none
// leads to a primary the error says why for each.
//
// Sentinels are dialled without opts, with 1s connect, read and write
// timeouts and within ctx; for Sentinels that require a password use
// Sentinels.Dial.
//
// Each new pooled connection goes to the primary of the moment; connections
// already in the pool stay where they are. When Sentinel demotes a primary
// that is still running it closes that server's client connections, which
// the pool then discards; to also drop idle connections to a server that is
// no longer the primary, set the pool's TestOnBorrow to call CheckPrimary
// (for example only for connections idle for more than a second). A lock
// attempt on a connection to a demoted primary fails with READONLY and is
// refused, never granted.
func SentinelDial(sentinels []string, master string, opts ...redis.DialOption) func(ctx context.Context) (redis.Conn, error) {
	return Sentinels{Addrs: sentinels, Master: master}.Dial(opts...)
}

// Sentinels names the Sentinels that know a primary, and how to talk to
// them.
type Sentinels struct {
	Addrs  []string // the Sentinels' addresses
	Master string   // the name they know the primary by
	// DialOptions are for the connections to the Sentinels, after the 1s
	// connect, read and write timeouts (which they can change): for
	// example redis.DialPassword for Sentinels with requirepass.
	DialOptions []redis.DialOption
}

// Dial is SentinelDial for s: a function for redis.Pool.DialContext that
// connects, with opts, to the primary s.Master names.
func (s Sentinels) Dial(opts ...redis.DialOption) func(ctx context.Context) (redis.Conn, error) {
	addrs, master := append([]string(nil), s.Addrs...), s.Master
	sopts := append([]redis.DialOption{redis.DialConnectTimeout(sentinelTimeout),
		redis.DialReadTimeout(sentinelTimeout), redis.DialWriteTimeout(sentinelTimeout)}, s.DialOptions...)
	var first atomic.Int64 // the Sentinel that answered last
	return func(ctx context.Context) (redis.Conn, error) {
		if len(addrs) == 0 {
			return nil, errors.New("redigo: SentinelDial: no Sentinel addresses")
		}
		var errs []error
		start := int(first.Load())
		for i := range addrs {
			j := (start + i) % len(addrs)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			addr, err := askSentinel(ctx, addrs[j], master, sopts)
			if err != nil {
				errs = append(errs, fmt.Errorf("sentinel %s: %w", addrs[j], err))
				continue
			}
			c, err := redis.DialContext(ctx, "tcp", addr, opts...)
			if err == nil {
				err = checkPrimary(ctx, c)
				if err != nil {
					_ = c.Close()
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("sentinel %s named %s: %w", addrs[j], addr, err))
				continue
			}
			first.Store(int64(j))
			return c, nil
		}
		return nil, fmt.Errorf("redigo: no Sentinel led to a primary of %q: %w", master, errors.Join(errs...))
	}
}

// askSentinel returns the address the Sentinel at addr has for master.
func askSentinel(ctx context.Context, addr, master string, opts []redis.DialOption) (string, error) {
	c, err := redis.DialContext(ctx, "tcp", addr, opts...)
	if err != nil {
		return "", err
	}
	defer c.Close()
	reply, err := redis.Strings(redis.DoContext(c, ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master))
	switch {
	case errors.Is(err, redis.ErrNil):
		return "", fmt.Errorf("does not know master %q", master)
	case err != nil:
		return "", err
	case len(reply) != 2:
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME replied %q, want a host and a port", reply)
	}
	return net.JoinHostPort(reply[0], reply[1]), nil
}

// CheckPrimary returns an error unless the server c is connected to
// answers ROLE with "master". Use it in redis.Pool.TestOnBorrow to drop
// pooled connections to a demoted primary:
//
//	TestOnBorrow: func(c redis.Conn, idleSince time.Time) error {
//		if time.Since(idleSince) < time.Second {
//			return nil
//		}
//		return redigo.CheckPrimary(c)
//	},
func CheckPrimary(c redis.Conn) error {
	return checkPrimary(context.Background(), c)
}

func checkPrimary(ctx context.Context, c redis.Conn) error {
	v, err := redis.Values(redis.DoContext(c, ctx, "ROLE"))
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if len(v) == 0 {
		return errors.New("ROLE replied an empty array")
	}
	role, err := redis.String(v[0], nil)
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if role != "master" {
		return fmt.Errorf("the server's role is %s, not master", role)
	}
	return nil
}
