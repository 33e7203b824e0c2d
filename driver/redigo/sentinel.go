package redigo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/gomodule/redigo/redis"
)

// Sentinels names the Sentinels that know a primary by the name Master.
// DialOptions follow 1s connect, read and write timeouts on the connections
// to the Sentinels: for example redis.DialPassword for their requirepass.
type Sentinels struct {
	Addrs       []string
	Master      string
	DialOptions []redis.DialOption
}

// Dial returns a redis.Pool.DialContext that connects with opts to the
// current primary of s.Master: within ctx it asks the Sentinels in turn,
// the one that answered last first, for its address and returns a
// connection once the server there answers ROLE with "master"; else the
// error says why for each Sentinel. Pooled connections stay where they
// are: Sentinel closes those to a primary it demotes, and CheckPrimary in
// the pool's TestOnBorrow drops idle ones. A lock attempt on a demoted
// primary fails with READONLY: it is refused, never granted.
func (s Sentinels) Dial(opts ...redis.DialOption) func(ctx context.Context) (redis.Conn, error) {
	addrs, master := slices.Clone(s.Addrs), s.Master
	sopts := append([]redis.DialOption{redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second)}, s.DialOptions...)
	var first atomic.Int64 // the Sentinel that answered last
	return func(ctx context.Context) (redis.Conn, error) {
		if len(addrs) == 0 {
			return nil, errors.New("dlm: redigo: Sentinels.Dial: no Sentinel addresses")
		}
		var errs []error
		unknown := 0 // Sentinels that do not know master
		for i, start := 0, int(first.Load()); i < len(addrs); i++ {
			j := (start + i) % len(addrs)
			c, err := dialPrimary(ctx, addrs[j], master, sopts, opts)
			if err == nil {
				first.Store(int64(j))
				return c, nil
			}
			if errors.Is(err, errUnknown) {
				unknown++
			}
			errs = append(errs, fmt.Errorf("sentinel %s: %w", addrs[j], err))
		}
		if unknown == len(addrs) {
			return nil, fmt.Errorf("%w %q (Sentinels %s)", driver.ErrUnknownMaster, master, strings.Join(addrs, ","))
		}
		return nil, fmt.Errorf("dlm: redigo: no Sentinel led to a primary of %q: %w", master, errors.Join(errs...))
	}
}

// errUnknown is a Sentinel's nil reply to GET-MASTER-ADDR-BY-NAME.
var errUnknown = errors.New("does not know master")

// dialPrimary asks the Sentinel at addr for master's address and dials it.
func dialPrimary(ctx context.Context, addr, master string, sopts, opts []redis.DialOption) (redis.Conn, error) {
	sc, err := redis.DialContext(ctx, "tcp", addr, sopts...)
	if err != nil {
		return nil, err
	}
	r, err := redis.Strings(redis.DoContext(sc, ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master))
	_ = sc.Close()
	if errors.Is(err, redis.ErrNil) {
		return nil, fmt.Errorf("%w %q", errUnknown, master)
	} else if err == nil && len(r) != 2 {
		return nil, fmt.Errorf("replied %q for master %q, want an address and a port", r, master)
	} else if err != nil {
		return nil, err
	}
	addr = net.JoinHostPort(r[0], r[1])
	c, err := redis.DialContext(ctx, "tcp", addr, opts...)
	if err == nil {
		if err = checkPrimary(ctx, c); err == nil {
			return c, nil
		}
		_ = c.Close()
	}
	return nil, fmt.Errorf("named %s: %w", addr, err)
}

// CheckPrimary returns an error unless c's server answers ROLE with "master":
// in redis.Pool.TestOnBorrow it drops connections to a demoted primary.
func CheckPrimary(c redis.Conn) error { return checkPrimary(context.Background(), c) }

func checkPrimary(ctx context.Context, c redis.Conn) error {
	v, err := redis.Values(redis.DoContext(c, ctx, "ROLE"))
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if role, _ := redis.String(append(v, nil)[0], nil); role != "master" {
		return fmt.Errorf("the server's role is %q, not master", role)
	}
	return nil
}
