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

// defaultURL is used when neither --url nor DLM_URL is given.
const defaultURL = "single://127.0.0.1:6379"

// targetFlags are the flags that say which deployment a command works on.
type targetFlags struct {
	url    *string
	config *string
}

func addTargetFlags(fs *flag.FlagSet) targetFlags {
	def := os.Getenv("DLM_URL")
	if def == "" {
		def = defaultURL
	}
	return targetFlags{
		url: fs.String("url", def, "strategy URL, e.g. single://host:6379, redlock://h1:6379,h2:6379,h3:6379?ttl=10s,\n"+
			"sentinel://s1:26379,s2:26379/mymaster?ack=all (default from DLM_URL)"),
		config: fs.String("config", "", "strategy config file (JSON); overrides --url"),
	}
}

// config returns the configuration the flags name.
func (f targetFlags) load() (strategy.Config, error) {
	if *f.config != "" {
		file, err := os.Open(*f.config)
		if err != nil {
			return strategy.Config{}, err
		}
		defer file.Close()
		return strategy.ParseConfig(file)
	}
	return strategy.ParseURL(*f.url)
}

// A target is a configured strategy and the clients it runs over.
type target struct {
	cfg     strategy.Config
	strat   dlm.Strategy
	clients []redis.UniversalClient
}

func (t *target) Close() {
	for _, c := range t.clients {
		_ = c.Close()
	}
}

// connect builds the clients and the strategy cfg describes (go-redis clients;
// nothing is dialled until the first command).
func connect(cfg strategy.Config) (*target, error) {
	t := &target{cfg: cfg}
	if len(cfg.Addrs) == 0 {
		return nil, fmt.Errorf("%w: no address in the strategy config", dlm.ErrInvalid)
	}
	var nodes []dlm.Node
	switch cfg.Strategy {
	default: // single, redlock: one client per address
		for _, a := range cfg.Addrs {
			c := redis.NewClient(&redis.Options{
				Addr: a, Username: cfg.Username, Password: cfg.Password,
				ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second,
			})
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
