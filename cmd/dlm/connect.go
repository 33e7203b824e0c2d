package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/driver/valkeygo"
	"github.com/dlmgo/dlm/nodekit"
)

// defaultURL is used when neither --url, DLM_URL nor --config is given.
const defaultURL = "single://127.0.0.1:6379"

// targetUsage describes the configuration flags for the commands' help;
// fallback says what is used when none of them is given.
func targetUsage(fallback string) string {
	return `The deployment comes from --config (a JSON file), else --url, else the
DLM_URL environment variable, else ` + fallback + ` (--url or --config
given empty is an error). One URL form per deployment:
  single://host:6379?ttl=10s                      one server
  redlock://h1:6379,h2:6379,h3:6379?timeout=50ms  independent masters (Redlock)
  sentinel://s1:26379,s2:26379/mymaster?ack=all   a primary found through Sentinel
  failover://primary:6379?ack=1                   a primary given by its address
  cluster://n1:7000,n2:7001                       a Redis Cluster, through any of its nodes
                                                  (?strategy=failover&ack=all to wait for replicas)
Credentials go in the URL, percent-encoded (user:password@ before the hosts;
the Sentinels' in the sentinel_username and sentinel_password parameters).
TLS: tls=true (tls_ca=FILE, tls_cert=FILE, tls_key=FILE); see docs/tls.md.
See docs/configuration.md for every field.
`
}

// targetFlags are the flags that say which deployment a command works on,
// and over which client.
type targetFlags struct {
	url      *string
	config   *string
	driver   *string
	fs       *flag.FlagSet // to tell a flag given empty from one not given
	fallback string        // what is used when nothing names a deployment
}

// drivers are the clients --driver names.
var drivers = map[string]config.Dialer{"goredis": goredis.Dial, "redigo": redigo.Dial, "rueidis": rueidis.Dial, "valkeygo": valkeygo.Dial}

// fallback says what is used when no flag or DLM_URL names a deployment.
// It also bounds the lines fs writes (boundLines): the flag package's
// errors quote a bad value or an unknown flag's name whole.
func addTargetFlags(fs *flag.FlagSet, fallback string) targetFlags {
	fs.SetOutput(boundLines(fs.Output()))
	return targetFlags{
		url:    fs.String("url", "", "deployment URL (default: $DLM_URL, else "+fallback+")"),
		config: fs.String("config", "", "deployment config file (JSON); overrides --url and DLM_URL"),
		driver: fs.String("driver", "goredis", "the Redis client: goredis, redigo, rueidis or valkeygo"),
		fs:     fs, fallback: fallback,
	}
}

// set reports whether the flag name was given on the command line, even
// empty.
func (f targetFlags) set(name string) bool { return flagGiven(f.fs, name) }

// flagGiven reports whether the flag name was given on fs's command line,
// whatever its value (a value equal to the default included).
func flagGiven(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(fl *flag.Flag) { found = found || fl.Name == name })
	return found
}

// zeroGiven reports whether one of the flags names was given as 0, for a
// count whose default, 0, means "not given" (dlm run's --permits and
// --readers): given explicitly, 0 is an error, not the default.
func zeroGiven(fs *flag.FlagSet, names ...string) bool {
	zero := false
	fs.Visit(func(fl *flag.Flag) {
		zero = zero || slices.Contains(names, fl.Name) && fl.Value.String() == "0"
	})
	return zero
}

// dialer returns the Dial of the client --driver names.
func (f targetFlags) dialer() (config.Dialer, error) {
	if d, ok := drivers[*f.driver]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("--driver %s: want goredis, redigo, rueidis or valkeygo", quoteInput(*f.driver))
}

// given reports whether the flags or the environment name a deployment
// (a flag given empty counts: load refuses it).
func (f targetFlags) given() bool {
	return f.set("url") || f.set("config") || os.Getenv("DLM_URL") != ""
}

// load returns the configuration the flags name (and checks --driver).
// --url or --config given empty is an error, not the same as leaving the
// flag out: it is most often a variable that is not set (--url "$REDIS_URL"),
// and falling back to DLM_URL or the default would lock elsewhere.
func (f targetFlags) load() (config.Config, error) {
	if _, err := f.dialer(); err != nil {
		return config.Config{}, err
	}
	for _, fl := range []struct {
		name string
		v    *string
		want string
	}{{"url", f.url, "a deployment URL"}, {"config", f.config, "a file"}} {
		if f.set(fl.name) && *fl.v == "" {
			return config.Config{}, fmt.Errorf("--%s is empty (a variable that is not set?): give %s, or leave --%s out to use DLM_URL, else %s", fl.name, fl.want, fl.name, f.fallback)
		}
	}
	if *f.config != "" {
		file, err := os.Open(*f.config)
		if err != nil {
			return config.Config{}, err
		}
		defer file.Close()
		cfg, err := config.ParseJSON(file)
		if err != nil {
			return config.Config{}, fmt.Errorf("%s: %w", *f.config, err)
		}
		return cfg, nil
	}
	u := *f.url
	if u == "" {
		u = os.Getenv("DLM_URL")
	}
	if u == "" {
		u = defaultURL
	}
	return config.ParseURL(u)
}

// attemptBound is how long --wait 0 gives its one attempt: 1s, or three
// node timeouts (the config's timeout) when that is longer.
func attemptBound(cfg config.Config) time.Duration {
	return max(oneAttempt, 3*time.Duration(cfg.Timeout))
}

// clusterHint returns advice for an error that shows a Cluster node given
// as a single server or a Redlock master (a MOVED or ASK reply), else "".
func clusterHint(cfg config.Config, err error) string {
	var re *driver.ReplyError
	if cfg.Cluster || !errors.As(err, &re) || re.Code != "MOVED" && re.Code != "ASK" {
		return ""
	}
	return fmt.Sprintf("\n  hint: %s is a Redis Cluster node: give the Cluster as cluster://%s", strings.Join(cfg.Addrs, ","), strings.Join(cfg.Addrs, ","))
}

// dbOutOfRange reports whether err holds the server's refusal of the
// configured database number (SELECT): "ERR DB index is out of range",
// from a driver (a *driver.ReplyError) or from the go-redis clients of doctor
// and the operator commands.
func dbOutOfRange(err error) bool {
	var ge redis.Error
	if errors.As(err, &ge) {
		err = nodekit.Reply(ge.Error(), err)
	}
	var re *driver.ReplyError
	return errors.As(err, &re) && re.Code == "ERR" && strings.HasPrefix(re.Message, "DB index is out of range")
}

// dbHint returns advice for an error that shows the server refused db, else "".
func dbHint(db int, err error) string {
	if !dbOutOfRange(err) {
		return ""
	}
	return fmt.Sprintf("\n  hint: db=%d: the server has no such database; it has databases 0 to its databases setting - 1 (16 by default): give a lower db, or raise databases in the server's configuration", db)
}

// open returns a Manager over the deployment cfg describes, on clients of
// --driver, and what closes them.
func (f targetFlags) open(ctx context.Context, cfg config.Config, opts ...dlm.Option) (*dlm.Manager, io.Closer, error) {
	dial, err := f.dialer()
	if err != nil {
		return nil, nil, err
	}
	return cfg.Open(ctx, dial, opts...)
}
