package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/strategy"
)

// defaultURL is used when neither --url, DLM_URL nor --config is given.
const defaultURL = "single://127.0.0.1:6379"

// targetUsage describes the configuration flags for the commands' help.
const targetUsage = `The deployment comes from --config (a JSON file), else --url, else the
DLM_URL environment variable, else ` + defaultURL + `. URL forms:
  single://host:6379?ttl=10s                        one server
  redlock://h1:6379,h2:6379,h3:6379?timeout=50ms    independent masters
  sentinel://s1:26379,s2:26379/mymaster?ack=all     a primary found through Sentinel
  failover://primary:6379?ack=1                     the failover strategy on a primary by address
Credentials go in the URL (redis-style user:password@; the Sentinels' in
sentinel_username and sentinel_password parameters). See the README's
Configuration section for every field.
`

// targetFlags are the flags that say which deployment a command works on.
type targetFlags struct {
	url    *string
	config *string
}

func addTargetFlags(fs *flag.FlagSet) targetFlags {
	return targetFlags{
		url:    fs.String("url", "", "strategy URL (default: $DLM_URL, else "+defaultURL+")"),
		config: fs.String("config", "", "strategy config file (JSON); overrides --url and DLM_URL"),
	}
}

// load returns the configuration the flags name.
func (f targetFlags) load() (strategy.Config, error) {
	if *f.config != "" {
		file, err := os.Open(*f.config)
		if err != nil {
			return strategy.Config{}, err
		}
		defer file.Close()
		cfg, err := strategy.ParseConfig(file)
		if err != nil {
			return strategy.Config{}, fmt.Errorf("%s: %w", *f.config, err)
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
	return strategy.ParseURL(u)
}

// A target is a configured strategy and the client it runs over.
type target struct {
	cfg     strategy.Config
	strat   dlm.Strategy
	clients []*redis.Client // one per node: the server, each Redlock master, or the (failover) primary
}

func (t *target) Close() {
	for _, c := range t.clients {
		_ = c.Close()
	}
}

// sentinelVia reports whether cfg reaches its primary through Sentinel.
func sentinelVia(cfg strategy.Config) bool { return cfg.Strategy == "failover" && cfg.Master != "" }

// newClient returns the go-redis client dlm uses for one server of cfg.
// Redlock's are those its README section recommends: the context's deadline
// bounds the socket, one round trip per call, one dial per attempt.
func newClient(cfg strategy.Config, addr string) *redis.Client {
	o := &redis.Options{
		Addr: addr, Username: cfg.Username, Password: cfg.Password,
		ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second,
	}
	if cfg.Strategy == "redlock" {
		o.DialerRetries = 1
	}
	return redis.NewClient(o)
}

// connect builds the clients and the strategy cfg describes. Nothing is
// dialled until the first command.
func connect(cfg strategy.Config) (*target, error) {
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("%w: strategy config: addrs: no address", dlm.ErrInvalid)
	}
	t := &target{cfg: cfg}
	var nodes []dlm.Node
	if sentinelVia(cfg) {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.Master, SentinelAddrs: cfg.Addrs,
			Username: cfg.Username, Password: cfg.Password,
			SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword,
			ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second,
		})
		t.clients = append(t.clients, c)
		nodes = append(nodes, goredis.New(c))
	} else {
		for _, a := range cfg.Addrs {
			c := newClient(cfg, a)
			t.clients = append(t.clients, c)
			nodes = append(nodes, goredis.New(c))
		}
	}
	s, err := cfg.New(nodes...)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.strat = s
	return t, nil
}
