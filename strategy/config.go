package strategy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/dlmgo/dlm"
)

// Config is the serialisable form of a strategy and its options, so that a
// program switches strategy by changing a string or a file, not its code.
// The zero value of an optional field means the strategy's default.
//
// Its JSON form uses the tags below; its URL form is
//
//	single://host:port?ttl=10s
//	redlock://h1:6379,h2:6379,h3:6379?ttl=10s&timeout=50ms
//	sentinel://s1:26379,s2:26379/mymaster?ack=all
//
// where the scheme names the strategy ("sentinel" is the failover strategy
// found through Sentinel), the hosts are Addrs, the path is Master, the user
// information is Username and Password, and each query parameter is the
// field with that JSON name.
type Config struct {
	// Strategy is "single", "redlock" or "failover".
	Strategy string `json:"strategy"`
	// Addrs are the endpoints a tool dials: the one server (single), the
	// independent masters (redlock) or the Sentinels (failover). New does
	// not dial; it takes the nodes built from them.
	Addrs []string `json:"addrs,omitempty"`
	// Master is the Sentinel master name (failover).
	Master string `json:"master,omitempty"`
	// Username and Password authenticate to the servers (tools only).
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`

	// TTL is the lease length, for dlm.WithTTL (tools only; 0: the default).
	TTL Duration `json:"ttl,omitempty"`
	// Timeout bounds each call to a node (WithTimeout).
	Timeout Duration `json:"timeout,omitempty"`
	// DriftFactor is the share of the TTL taken off for clock drift
	// (WithDriftFactor); nil means the default.
	DriftFactor *float64 `json:"drift_factor,omitempty"`
}

// Duration is a time.Duration written as a string such as "1.5s" in JSON
// and URLs.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "10s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Strategies lists the strategy names Config accepts.
var Strategies = []string{"single"}

// ParseConfig reads the JSON form of a Config. Unknown fields are errors.
func ParseConfig(r io.Reader) (Config, error) {
	var c Config
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: strategy config: %w", dlm.ErrInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ParseURL reads the URL form of a Config.
func ParseURL(s string) (Config, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Config{}, fmt.Errorf("%w: strategy URL: %w", dlm.ErrInvalid, err)
	}
	c := Config{Strategy: u.Scheme}
	if u.Scheme == "sentinel" {
		c.Strategy = "failover"
	}
	if u.Host != "" {
		c.Addrs = strings.Split(u.Host, ",")
	}
	c.Master = strings.Trim(u.Path, "/")
	if u.User != nil {
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	// Query parameters are fields by their JSON names, set through JSON so
	// that both forms accept exactly the same values.
	for name, vals := range u.Query() {
		f, ok := fieldByJSONName(name)
		if !ok || name == "strategy" || name == "addrs" || name == "master" || name == "username" || name == "password" {
			return Config{}, fmt.Errorf("%w: strategy URL: unknown parameter %q", dlm.ErrInvalid, name)
		}
		if len(vals) != 1 {
			return Config{}, fmt.Errorf("%w: strategy URL: parameter %q given %d times", dlm.ErrInvalid, name, len(vals))
		}
		raw := strconv.Quote(vals[0])
		if k := f.Type.Kind(); k == reflect.Int || k == reflect.Float64 || k == reflect.Pointer {
			if _, err := strconv.ParseFloat(vals[0], 64); err != nil {
				return Config{}, fmt.Errorf("%w: strategy URL: parameter %q: %q is not a number", dlm.ErrInvalid, name, vals[0])
			}
			raw = vals[0]
		}
		if err := json.Unmarshal([]byte(`{"`+name+`":`+raw+`}`), &c); err != nil {
			return Config{}, fmt.Errorf("%w: strategy URL: parameter %q: %w", dlm.ErrInvalid, name, err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func fieldByJSONName(name string) (reflect.StructField, bool) {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if strings.Split(f.Tag.Get("json"), ",")[0] == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// Validate reports the first bad field, by its JSON name.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: strategy config: %s: %s", dlm.ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	switch c.Strategy {
	case "single":
		if len(c.Addrs) > 1 {
			return bad("addrs", "single takes one address, got %d", len(c.Addrs))
		}
	case "":
		return bad("strategy", "missing; one of %s", strings.Join(Strategies, ", "))
	default:
		return bad("strategy", "unknown strategy %q; one of %s", c.Strategy, strings.Join(Strategies, ", "))
	}
	for i, a := range c.Addrs {
		if a == "" {
			return bad("addrs", "address %d is empty", i)
		}
	}
	if c.TTL < 0 {
		return bad("ttl", "%v is negative", time.Duration(c.TTL))
	}
	if c.Timeout < 0 {
		return bad("timeout", "%v is negative", time.Duration(c.Timeout))
	}
	if f := c.DriftFactor; f != nil && !(*f >= 0 && *f < 0.5) {
		return bad("drift_factor", "%v is not in [0, 0.5)", *f)
	}
	return nil
}

// Options returns the strategy options the Config sets.
func (c Config) Options() []Option {
	var opts []Option
	if c.Timeout > 0 {
		opts = append(opts, WithTimeout(time.Duration(c.Timeout)))
	}
	if c.DriftFactor != nil {
		opts = append(opts, WithDriftFactor(*c.DriftFactor))
	}
	return opts
}

// New builds the configured strategy over nodes, which the caller built from
// Addrs with the driver of its choice.
func (c Config) New(nodes ...dlm.Node) (dlm.Strategy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Strategy {
	case "single":
		if len(nodes) != 1 {
			return nil, fmt.Errorf("%w: strategy config: single takes one node, got %d", dlm.ErrInvalid, len(nodes))
		}
		return NewSingle(nodes[0], c.Options()...)
	}
	return nil, fmt.Errorf("%w: strategy config: strategy %q cannot be built", dlm.ErrInvalid, c.Strategy)
}
