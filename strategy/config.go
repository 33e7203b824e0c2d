package strategy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlmgo/dlm"
)

// Config is the serialisable form of a strategy and its options, so that a
// program switches strategy by changing a string or a file, not its code.
// The zero value of an optional field means the strategy's default; a field
// that does not apply to the chosen strategy is an error.
//
// Its JSON form uses the tags below; its URL form is
//
//	single://host:port?ttl=10s
//	redlock://h1:6379,h2:6379,h3:6379?ttl=10s&timeout=50ms
//	sentinel://s1:26379,s2:26379/mymaster?ack=all&replicas=2
//	failover://primary:6379?ack=1
//
// where the scheme names the strategy, the hosts are Addrs (IPv6 ones in
// brackets: redlock://[::1]:6379,[::1]:6380,[::1]:6381), the path is
// Master, the user information is Username and Password, and each query
// parameter is the field with that JSON name, in the same text form as in
// JSON (durations such as "1.5s", numbers, and ack as "all", "majority",
// "none" or a number). "sentinel" is the failover strategy found through
// Sentinel: Addrs are the Sentinels and Master (required) the name they know
// the primary by. "failover" without a path is the failover strategy on a
// primary given by its one address; with a path it is the same as
// "sentinel".
type Config struct {
	// Strategy is "single", "redlock" or "failover".
	Strategy string `json:"strategy"`
	// Addrs are the endpoints a tool dials: the one server (single), the
	// independent masters (redlock), or, for failover, the Sentinels when
	// Master is set and the primary's one address when it is not. New does
	// not dial; it takes the nodes built from them.
	Addrs []string `json:"addrs,omitempty"`
	// Master is the name Sentinel knows the primary by (failover only).
	Master string `json:"master,omitempty"`
	// Username and Password authenticate to the Redis servers (tools only).
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// SentinelUsername and SentinelPassword authenticate to the Sentinels
	// (failover through Sentinel only; tools only). In the URL form they are
	// query parameters.
	SentinelUsername string `json:"sentinel_username,omitempty"`
	SentinelPassword string `json:"sentinel_password,omitempty"`

	// TTL is the lease length, for dlm.WithTTL (tools only; 0: the default).
	TTL Duration `json:"ttl,omitempty"`
	// Timeout bounds each call to a node (WithTimeout; all strategies).
	Timeout Duration `json:"timeout,omitempty"`
	// DriftFactor is the share of the TTL taken off for clock drift
	// (WithDriftFactor; all strategies); nil means the default.
	DriftFactor *float64 `json:"drift_factor,omitempty"`

	// MaxExtensions bounds the extensions of one acquisition
	// (WithMaxExtensions; redlock only; 0: no bound).
	MaxExtensions int `json:"max_extensions,omitempty"`
	// MaxHold bounds how long one acquisition is extended (WithMaxHold;
	// redlock only; 0: no bound).
	MaxHold Duration `json:"max_hold,omitempty"`

	// Ack is how many replicas must acknowledge a write (WithAcks; failover
	// only; nil: AckAll).
	Ack *AckPolicy `json:"ack,omitempty"`
	// WaitTimeout bounds the wait for acknowledgements (WithWaitTimeout;
	// failover only; 0: DefaultWaitTimeout).
	WaitTimeout Duration `json:"wait_timeout,omitempty"`
	// Replicas is the deployment's replica count (WithReplicas; failover
	// only; nil: the default, 1).
	Replicas *int `json:"replicas,omitempty"`
	// WaitAOF makes the strategy wait for fsyncs with WAITAOF (WithWaitAOF;
	// failover only): "replicas" waits for the replicas' fsync
	// (WithWaitAOF(false)), "local" for the primary's too (WithWaitAOF(true)),
	// "" (the default) waits with WAIT instead.
	WaitAOF string `json:"wait_aof,omitempty"`
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
		return errors.New("want a duration string such as \"10s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"10s\"", s)
	}
	*d = Duration(v)
	return nil
}

// Strategies lists the strategy names Config accepts.
var Strategies = []string{"single", "redlock", "failover"}

// onlyFor names the fields that apply to some strategies only.
var onlyFor = map[string][]string{
	"master":            {"failover"},
	"sentinel_username": {"failover"},
	"sentinel_password": {"failover"},
	"max_extensions":    {"redlock"},
	"max_hold":          {"redlock"},
	"ack":               {"failover"},
	"wait_timeout":      {"failover"},
	"replicas":          {"failover"},
	"wait_aof":          {"failover"},
}

// urlParts are the fields the URL form carries outside its query.
var urlParts = []string{"strategy", "addrs", "master", "username", "password"}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: strategy config: %s", dlm.ErrInvalid, fmt.Sprintf(format, args...))
}

func badField(field, format string, args ...any) error {
	return invalid("%s: %s", field, fmt.Sprintf(format, args...))
}

// ParseConfig reads the JSON form of a Config: one object. Unknown fields,
// fields that do not apply to the strategy and bad values are errors that
// name the field and match dlm.ErrInvalid.
func ParseConfig(r io.Reader) (Config, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&fields); err != nil {
		return Config{}, invalid("want one JSON object: %v", err)
	}
	if dec.More() {
		return Config{}, invalid("want one JSON object, found more after it")
	}
	var c Config
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := c.set(name, fields[name]); err != nil {
			return Config{}, err
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// set decodes one field, by its JSON name, from its JSON value.
func (c *Config) set(name string, raw json.RawMessage) error {
	f, ok := fieldByJSONName(name)
	if !ok {
		return badField(strconv.Quote(name), "unknown field")
	}
	v := reflect.New(f.Type)
	if err := json.Unmarshal(raw, v.Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badField(name, "want %s, got %s", describe(f.Type), te.Value)
		}
		return badField(name, "%s", strings.TrimPrefix(err.Error(), dlm.ErrInvalid.Error()+": "))
	}
	reflect.ValueOf(c).Elem().FieldByIndex(f.Index).Set(v.Elem())
	return nil
}

func describe(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list of strings"
	}
	return "a string"
}

// ParseURL reads the URL form of a Config (see Config). Unknown parameters,
// parameters that do not apply to the strategy and bad values are errors
// that name the field and match dlm.ErrInvalid.
func ParseURL(s string) (Config, error) {
	s, hosts := cutHosts(s)
	u, err := url.Parse(s)
	if err != nil {
		return Config{}, invalid("URL: %v", err)
	}
	if u.Opaque != "" || u.Scheme == "" {
		return Config{}, badField("strategy", "missing; the URL must begin with one of single://, redlock://, sentinel://, failover://")
	}
	c := Config{Strategy: u.Scheme}
	if u.Scheme == "sentinel" {
		c.Strategy = "failover"
	}
	for _, h := range hosts {
		if h != "" {
			if _, err := url.Parse("redis://" + h); err != nil {
				return Config{}, badField("addrs", "%q: %v", h, errors.Unwrap(err))
			}
		}
		c.Addrs = append(c.Addrs, h)
	}
	c.Master = strings.Trim(u.Path, "/")
	if u.Scheme == "sentinel" && c.Master == "" {
		return Config{}, badField("master", "sentinel:// needs the master name as the path, e.g. sentinel://s1:26379,s2:26379/mymaster")
	}
	if u.User != nil {
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, invalid("URL query: %v", err)
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		vals := q[name]
		f, ok := fieldByJSONName(name)
		if !ok || slices.Contains(urlParts, name) {
			return Config{}, badField(strconv.Quote(name), "unknown parameter")
		}
		if len(vals) != 1 {
			return Config{}, badField(name, "given %d times", len(vals))
		}
		// Numbers go to JSON as they are, everything else as a string, so
		// that both forms accept exactly the same values.
		raw := strconv.Quote(vals[0])
		if describe(f.Type) != "a string" {
			if _, err := strconv.ParseFloat(vals[0], 64); err != nil {
				return Config{}, badField(name, "%q is not a number", vals[0])
			}
			raw = vals[0]
		}
		if err := c.set(name, json.RawMessage(raw)); err != nil {
			return Config{}, err
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// cutHosts takes the comma-separated host list out of the URL s, leaving
// an empty host in its place: url.Parse rejects a list that holds a
// bracketed IPv6 address, such as [::1]:6379,[::1]:6380.
func cutHosts(s string) (string, []string) {
	i := strings.Index(s, "://")
	if i < 0 {
		return s, nil
	}
	authority := s[i+3:]
	if end := strings.IndexAny(authority, "/?#"); end >= 0 {
		authority = authority[:end]
	}
	hostStart := i + 3 + strings.LastIndex(authority, "@") + 1
	hostEnd := i + 3 + len(authority)
	if hostStart == hostEnd {
		return s, nil
	}
	return s[:hostStart] + s[hostEnd:], strings.Split(s[hostStart:hostEnd], ",")
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

// URL returns the URL form of c, password included; ParseURL(c.URL())
// returns c for any valid c whose Addrs, Master and Username contain no ','
// or '/'.
func (c Config) URL() string { return c.url().String() }

// String returns the URL form of c with the passwords redacted.
func (c Config) String() string {
	if c.SentinelPassword != "" {
		c.SentinelPassword = "xxxxx"
	}
	return c.url().Redacted()
}

func (c Config) url() *url.URL {
	u := &url.URL{Scheme: c.Strategy, Host: strings.Join(c.Addrs, ",")}
	if c.Master != "" {
		u.Path = "/" + c.Master
		if c.Strategy == "failover" {
			u.Scheme = "sentinel"
		}
	}
	switch {
	case c.Password != "":
		u.User = url.UserPassword(c.Username, c.Password)
	case c.Username != "":
		u.User = url.User(c.Username)
	}
	q := url.Values{}
	v := reflect.ValueOf(c)
	t := v.Type()
	for i := range t.NumField() {
		name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		if slices.Contains(urlParts, name) || v.Field(i).IsZero() {
			continue
		}
		b, err := json.Marshal(v.Field(i).Interface())
		if err != nil {
			continue // cannot happen: every field marshals
		}
		s := string(b)
		if uq, err := strconv.Unquote(s); err == nil {
			s = uq
		}
		q.Set(name, s)
	}
	u.RawQuery = q.Encode()
	return u
}

// Validate reports the first bad field, by its JSON name, in an error
// matching dlm.ErrInvalid: an unknown strategy, a field that does not apply
// to the strategy, a value out of range, or addresses the strategy cannot
// take (empty, repeated, or more than one for single and for failover
// without Master).
func (c Config) Validate() error {
	if !slices.Contains(Strategies, c.Strategy) {
		if c.Strategy == "" {
			return badField("strategy", "missing; one of %s", strings.Join(Strategies, ", "))
		}
		return badField("strategy", "unknown strategy %q; one of %s", c.Strategy, strings.Join(Strategies, ", "))
	}
	v := reflect.ValueOf(c)
	t := v.Type()
	for i := range t.NumField() {
		name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		if only, ok := onlyFor[name]; ok && !v.Field(i).IsZero() && !slices.Contains(only, c.Strategy) {
			return badField(name, "applies only to the %s strategy, not to %s", strings.Join(only, ", "), c.Strategy)
		}
	}
	for i, a := range c.Addrs {
		if a == "" {
			return badField("addrs", "address %d is empty", i)
		}
		if slices.Index(c.Addrs, a) < i {
			return badField("addrs", "%s is given twice", a)
		}
	}
	switch {
	case c.Strategy == "single" && len(c.Addrs) > 1:
		return badField("addrs", "single takes one address, got %d", len(c.Addrs))
	case c.Strategy == "failover" && c.Master == "" && len(c.Addrs) > 1:
		return badField("addrs", "failover without master takes the primary's one address, got %d "+
			"(set master to go through Sentinel: sentinel://s1,s2,s3/mymaster)", len(c.Addrs))
	case c.Master == "" && c.SentinelUsername != "":
		return badField("sentinel_username", "applies only through Sentinel (set master)")
	case c.Master == "" && c.SentinelPassword != "":
		return badField("sentinel_password", "applies only through Sentinel (set master)")
	}
	for name, d := range map[string]Duration{"ttl": c.TTL, "timeout": c.Timeout, "max_hold": c.MaxHold} {
		if d < 0 {
			return badField(name, "%v is negative", time.Duration(d))
		}
	}
	if f := c.DriftFactor; f != nil && !(*f >= 0 && *f < 0.5) {
		return badField("drift_factor", "%v is not in [0, 0.5)", *f)
	}
	if c.MaxExtensions < 0 {
		return badField("max_extensions", "%d is negative", c.MaxExtensions)
	}
	if c.Replicas != nil && *c.Replicas < 0 {
		return badField("replicas", "%d is negative", *c.Replicas)
	}
	if c.WaitTimeout != 0 && c.WaitTimeout < Duration(time.Millisecond) {
		return badField("wait_timeout", "%v is below 1ms", time.Duration(c.WaitTimeout))
	}
	switch c.WaitAOF {
	case "", "replicas", "local":
	default:
		return badField("wait_aof", "%q: want replicas or local", c.WaitAOF)
	}
	if c.Strategy == "failover" {
		none := c.Ack != nil && *c.Ack == AckNone()
		if none && c.WaitAOF == "replicas" {
			return badField("wait_aof", "replicas with ack none waits for nothing")
		}
		wt := time.Duration(c.WaitTimeout)
		if wt == 0 {
			wt = DefaultWaitTimeout
		}
		if c.Timeout > 0 && (!none || c.WaitAOF != "") && time.Duration(c.Timeout) <= wt {
			return badField("timeout", "%v must exceed the wait timeout %v", time.Duration(c.Timeout), wt)
		}
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
	if c.MaxExtensions > 0 {
		opts = append(opts, WithMaxExtensions(c.MaxExtensions))
	}
	if c.MaxHold > 0 {
		opts = append(opts, WithMaxHold(time.Duration(c.MaxHold)))
	}
	if c.Ack != nil {
		opts = append(opts, WithAcks(*c.Ack))
	}
	if c.WaitTimeout > 0 {
		opts = append(opts, WithWaitTimeout(time.Duration(c.WaitTimeout)))
	}
	if c.Replicas != nil {
		opts = append(opts, WithReplicas(*c.Replicas))
	}
	if c.WaitAOF != "" {
		opts = append(opts, WithWaitAOF(c.WaitAOF == "local"))
	}
	return opts
}

// New builds the configured strategy over nodes, which the caller built from
// Addrs with the driver of its choice: for single one node, for redlock one
// per independent master (at least one, all distinct), for failover one
// node on the primary (for go-redis, over a client from
// redis.NewFailoverClient when Master is set) that implements
// dlm.ReplicaWaiter. Errors match dlm.ErrInvalid.
func (c Config) New(nodes ...dlm.Node) (dlm.Strategy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Strategy {
	case "single", "failover":
		if len(nodes) != 1 {
			return nil, invalid("nodes: %s takes one node, got %d", c.Strategy, len(nodes))
		}
		if c.Strategy == "single" {
			return NewSingle(nodes[0], c.Options()...)
		}
		return NewFailover(nodes[0], c.Options()...)
	case "redlock":
		return NewRedlock(nodes, c.Options()...)
	}
	return nil, badField("strategy", "%q cannot be built", c.Strategy)
}
