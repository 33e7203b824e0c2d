// Package config is the serialisable form of a dlm deployment: which
// strategy, on which servers, with which credentials and options, as JSON or
// as a URL, so that a program switches deployment by changing a string or a
// file, not its code. Open turns a URL into a working dlm.Manager over the
// driver the caller picks.
package config

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/echo"
	"github.com/dlmgo/dlm/strategy"
)

// Config describes a deployment and the options of its strategy and
// Manager. The zero value of an optional field means the default; a field
// that does not apply to the chosen strategy is an error.
//
// Its JSON form uses the tags below; its URL form is one of
//
//	single://host:6379?ttl=10s
//	redlock://h1:6379,h2:6379,h3:6379?timeout=50ms
//	sentinel://s1:26379,s2:26379,s3:26379/mymaster?ack=all&replicas=2
//	failover://primary:6379?ack=1
//	cluster://n1:7000,n2:7001?ttl=10s
//	cluster://n1:7000,n2:7001?strategy=failover&ack=all
//
// where the scheme names the deployment, the hosts are Addrs (IPv6 ones in
// brackets: redlock://[::1]:6379,[::1]:6380,[::1]:6381), user:password@
// before the hosts is Username and Password (percent-encoded: a '#' in a
// password is %23, a '%' is %25), and each query parameter is the field
// with that JSON name, in the same text form as in JSON (durations such as
// "1.5s", numbers, and ack as "all", "majority", "none" or a number).
// sentinel:// is the failover strategy on the primary the Sentinels Addrs
// know by the name in the path (Master, required); failover:// is the
// failover strategy on a primary given by its one address, and takes no
// path. cluster:// is one Redis Cluster, given by any of its nodes (Addrs:
// the client finds the others), on which runs the single strategy, or the
// failover strategy with strategy=failover (each lock then waits for the
// replicas of the master that holds its slot); it takes no path, and its
// strategy parameter is the only one the URL form takes for that field.
// rediss://host:port and redis://host:port are single:// with tls=true and
// without, their path the database number. TLS, ACL users and db are
// described in docs/tls.md.
type Config struct {
	// Strategy is "single", "redlock" or "failover".
	Strategy string `json:"strategy"`
	// Addrs are the servers: the one server (single), the independent
	// masters (redlock), or, for failover, the Sentinels when Master is set
	// and the primary's one address when it is not.
	Addrs []string `json:"addrs,omitempty"`
	// Master is the name the Sentinels know the primary by (failover only).
	Master string `json:"master,omitempty"`
	// Cluster makes Addrs seed nodes of one Redis Cluster, which the
	// strategy (single or failover) uses as one node through a Cluster
	// client.
	Cluster bool `json:"cluster,omitempty"`
	// Username and Password authenticate to the Redis servers.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// SentinelUsername and SentinelPassword authenticate to the Sentinels
	// (failover through Sentinel only). In the URL form they are query
	// parameters.
	SentinelUsername string `json:"sentinel_username,omitempty"`
	SentinelPassword string `json:"sentinel_password,omitempty"`
	// DB is the database number the locks live in (SELECT; 0: the default).
	// A Redis Cluster has only database 0.
	DB int `json:"db,omitempty"`

	// TLS makes the clients connect to the Redis servers over TLS, verifying
	// their certificates against TLSCA (or the system's roots when it is
	// empty). See docs/tls.md.
	TLS bool `json:"tls,omitempty"`
	// TLSCA is a PEM file of the certificate authorities to trust.
	TLSCA string `json:"tls_ca,omitempty"`
	// TLSCert and TLSKey are PEM files of the client's certificate and key,
	// for servers that require one (tls-auth-clients); both or neither.
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	// TLSServerName is the name to verify the servers' certificates for
	// (default: the host of the address dialled).
	TLSServerName string `json:"tls_server_name,omitempty"`
	// TLSInsecure skips the verification of the servers' certificates: for
	// tests only, it lets anyone in the path read and change the traffic.
	TLSInsecure bool `json:"tls_insecure,omitempty"`
	// SentinelTLS makes the clients connect to the Sentinels over TLS too,
	// with the same tls_* settings (failover through Sentinel only).
	SentinelTLS bool `json:"sentinel_tls,omitempty"`

	// TTL is the lease length (dlm.WithTTL; at most dlm.MaxTTL; 0:
	// dlm.DefaultTTL).
	TTL Duration `json:"ttl,omitempty"`
	// Renew makes the Manager renew its locks once this fraction of the TTL
	// has passed (dlm.WithAutoRenew; in (0, 1); 0: no auto-renewal).
	Renew float64 `json:"renew,omitempty"`
	// MaxHold is how long a lock may be held: renewal stops after it and
	// Lock.Extend refuses past it (WithAutoRenew's maxHold; needs Renew;
	// 0: no bound).
	MaxHold Duration `json:"max_hold,omitempty"`

	// Timeout bounds each call to a node (strategy.WithTimeout).
	Timeout Duration `json:"timeout,omitempty"`
	// DriftFactor is the share of the TTL taken off for clock drift
	// (strategy.WithDriftFactor); nil means the default.
	DriftFactor *float64 `json:"drift_factor,omitempty"`
	// MaxTTL turns the amnesia guard on: the longest lease any client of
	// these keys takes (strategy.WithMaxTTL; 0: off). TTL must not exceed it.
	MaxTTL Duration `json:"max_ttl,omitempty"`

	// Ack is how many replicas must acknowledge a write (strategy.WithAcks;
	// failover only; nil: AckAll).
	Ack *strategy.AckPolicy `json:"ack,omitempty"`
	// WaitTimeout bounds the wait for acknowledgements
	// (strategy.WithWaitTimeout; failover only; 0: the default).
	WaitTimeout Duration `json:"wait_timeout,omitempty"`
	// Replicas is the deployment's replica count (strategy.WithReplicas;
	// failover only; nil: the default, 1).
	Replicas *int `json:"replicas,omitempty"`
	// WaitAOF makes the strategy wait for fsyncs with WAITAOF
	// (strategy.WithWaitAOF; failover only): "replicas" waits for the
	// replicas' fsync, "local" for the primary's too, "" (the default)
	// waits with WAIT instead.
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
		return fmt.Errorf("%s is not a duration such as \"10s\"", echo.Quote(s))
	}
	*d = Duration(v)
	return nil
}

// builders build each strategy a Config can name from its options and the
// nodes the caller dialled: adding a strategy is one line here.
var builders = map[string]func(c Config, nodes []driver.Node) (driver.Strategy, error){
	"single": func(c Config, n []driver.Node) (driver.Strategy, error) { return oneNode(c, n, strategy.NewSingle) },
	"redlock": func(c Config, n []driver.Node) (driver.Strategy, error) {
		return strategy.NewRedlock(n, c.strategyOptions()...)
	},
	"failover": func(c Config, n []driver.Node) (driver.Strategy, error) { return oneNode(c, n, strategy.NewFailover) },
}

// oneNode builds a strategy that runs on exactly one node.
func oneNode[S driver.Strategy](c Config, nodes []driver.Node, build func(driver.Node, ...strategy.Option) (S, error)) (driver.Strategy, error) {
	if len(nodes) != 1 {
		return nil, invalid("nodes: %s takes one node, got %d", c.Strategy, len(nodes))
	}
	s, err := build(nodes[0], c.strategyOptions()...)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

// strategyNames lists the strategies a Config can name, sorted.
func strategyNames() string { return strings.Join(slices.Sorted(maps.Keys(builders)), ", ") }

// urlSchemes lists the schemes of ParseURL: one per strategy, sentinel://
// and cluster://, and redis:// and rediss:// (single://, the form managed
// services hand out).
func urlSchemes() string {
	var s []string
	for _, name := range append([]string{"single", "redlock", "sentinel", "failover", "cluster", "redis", "rediss"}, slices.Sorted(maps.Keys(builders))...) {
		if !slices.Contains(s, name+"://") {
			s = append(s, name+"://")
		}
	}
	return strings.Join(s, ", ")
}

// failoverOnly are the fields that apply to the failover strategy only.
var failoverOnly = []string{"master", "sentinel_username", "sentinel_password", "sentinel_tls", "ack", "wait_timeout", "replicas", "wait_aof"}

// urlParts are the fields the URL form carries outside its query.
var urlParts = []string{"strategy", "addrs", "master", "cluster", "username", "password"}

// encodeCredentials is the advice of errors about a URL's credentials; the
// errors never quote the URL, which may hold a password.
const encodeCredentials = "percent-encode '@', '/', '?', '#' and '%' in the user name and password (%40, %2F, %3F, %23, %25)"

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: config: %s", dlm.ErrInvalid, fmt.Sprintf(format, args...))
}

func badField(field, format string, args ...any) error {
	return invalid("%s: %s", field, fmt.Sprintf(format, args...))
}

// ParseJSON reads the JSON form of a Config: one object. Unknown fields,
// fields that do not apply to the strategy and bad values are errors that
// name the field and match dlm.ErrInvalid.
func ParseJSON(r io.Reader) (Config, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&fields); err != nil {
		return Config{}, invalid("want one JSON object: %v", err)
	}
	if dec.More() {
		return Config{}, invalid("want one JSON object, found more after it")
	}
	var c Config
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if err := c.set(name, fields[name]); err != nil {
			return Config{}, err
		}
	}
	return c, c.Validate()
}

// set decodes one field, by its JSON name, from its JSON value.
func (c *Config) set(name string, raw json.RawMessage) error {
	f, ok := fieldByJSONName(name)
	if !ok {
		return badField(echo.Quote(name), "unknown field")
	}
	v := reflect.New(f.Type)
	if err := json.Unmarshal(raw, v.Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			got := te.Value // "number 1.5": the literal, of any length
			if len(got) > echo.Max {
				got = fmt.Sprintf("%s…(%d bytes)", got[:echo.Max], len(got))
			}
			return badField(name, "want %s, got %s", describe(f.Type), got)
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
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

func fieldByJSONName(name string) (reflect.StructField, bool) {
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if jsonName(t.Field(i)) == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string { return strings.Split(f.Tag.Get("json"), ",")[0] }

// ParseURL reads the URL form of a Config (see Config). Unknown parameters,
// parameters that do not apply to the strategy and bad values are errors
// that name the field and match dlm.ErrInvalid. No error quotes the user
// information or the Sentinels' credentials.
func ParseURL(s string) (Config, error) {
	u, err := splitURL(s)
	if err != nil {
		return Config{}, err
	}
	c := Config{Strategy: u.scheme}
	if err := c.setScheme(u.scheme, u.query); err != nil {
		return Config{}, err
	}
	if err := c.setUserinfo(u.userinfo, u.hasUser); err != nil {
		return Config{}, err
	}
	if err := c.setHosts(u.hosts); err != nil {
		return Config{}, err
	}
	if err := c.setPath(u.scheme, u.path, u.query); err != nil {
		return Config{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(u.query)) {
		if err := c.setParam(name, u.query[name]); err != nil {
			return Config{}, err
		}
	}
	return c, c.Validate()
}

// A rawURL is a URL cut into its parts, none of them unescaped yet but
// the query.
type rawURL struct {
	scheme, userinfo, hosts, path string
	hasUser                       bool
	query                         url.Values
}

// splitURL cuts s into its parts, checking the scheme and that no part
// holds what a misplaced character of a password would leave there (a
// '#', an '@' after the hosts).
func splitURL(s string) (rawURL, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" {
		return rawURL{}, badField("strategy", "missing; the URL must begin with one of %s", urlSchemes())
	}
	if !slices.Contains(strings.Split(urlSchemes(), ", "), scheme+"://") {
		return rawURL{}, badField("strategy", "unknown URL scheme %s; one of %s", echo.Quote(scheme+"://"), urlSchemes())
	}
	if strings.Contains(rest, "#") {
		return rawURL{}, invalid("URL: a '#' (a URL takes no fragment); %s", encodeCredentials)
	}
	// The hosts are cut out by hand: url.Parse rejects a list that holds
	// a bracketed IPv6 address, and its errors quote the password.
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	u := rawURL{scheme: scheme}
	u.userinfo, u.hosts, u.hasUser = cutLast(authority, "@")
	if !u.hasUser {
		u.hosts = authority
	}
	path, rawQuery, _ := strings.Cut(tail, "?")
	u.path = path
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		var ee url.EscapeError
		if errors.As(err, &ee) {
			return rawURL{}, invalid("URL query: a '%%' that starts no escape (write it as %%25)")
		}
		return rawURL{}, invalid("URL query: %v", err)
	}
	u.query = q
	if strayAt(path, q) {
		return rawURL{}, invalid("URL: an '@' after the hosts; %s", encodeCredentials)
	}
	return u, nil
}

// strayAt reports an '@' after the hosts: a password held a '/' or '?'
// that ended the user information early, and what follows is not to be
// quoted. The Sentinels' credentials may hold one.
func strayAt(path string, q url.Values) bool {
	if strings.Contains(path, "@") {
		return true
	}
	for name, vals := range q {
		credential := name == "sentinel_username" || name == "sentinel_password"
		for _, v := range vals {
			if strings.Contains(name, "@") || strings.Contains(v, "@") && !credential {
				return true
			}
		}
	}
	return false
}

// setScheme sets what the scheme says: the strategy, TLS, Cluster; a
// cluster:// URL's strategy parameter is taken out of q.
func (c *Config) setScheme(scheme string, q url.Values) error {
	switch scheme {
	case "redis", "rediss": // the form managed services hand out: one server
		c.Strategy, c.TLS = "single", scheme == "rediss"
	case "sentinel":
		c.Strategy = "failover"
	case "cluster":
		c.Strategy, c.Cluster = "single", true
		if s, ok := q["strategy"]; ok {
			if len(s) != 1 || s[0] != "single" && s[0] != "failover" {
				return badField("strategy", "cluster:// runs single or failover (strategy=failover), got %s", echo.Quote(strings.Join(s, ",")))
			}
			c.Strategy = s[0]
			delete(q, "strategy")
		}
	}
	return nil
}

// setUserinfo sets Username and Password from the user information.
func (c *Config) setUserinfo(userinfo string, hasUser bool) error {
	if !hasUser {
		return nil
	}
	user, pass, _ := strings.Cut(userinfo, ":")
	var err error
	if c.Username, err = url.PathUnescape(user); err != nil {
		return badField("username", "a '%%' that starts no escape (write it as %%25)")
	}
	if c.Password, err = url.PathUnescape(pass); err != nil {
		return badField("password", "a '%%' that starts no escape (write it as %%25)")
	}
	return nil
}

// setHosts sets Addrs from the comma-separated hosts.
func (c *Config) setHosts(hosts string) error {
	if hosts == "" {
		return nil
	}
	for _, h := range strings.Split(hosts, ",") {
		if h != "" {
			if _, err := url.Parse("redis://" + h); err != nil {
				return badField("addrs", "%s: want host:port, with an IPv6 host in brackets ([::1]:6379)", echo.Quote(h))
			}
		}
		c.Addrs = append(c.Addrs, h)
	}
	return nil
}

// setPath sets what the path says: the master name of sentinel://, the
// database of redis:// and rediss:// (with q's db); the other schemes take
// none.
func (c *Config) setPath(scheme, path string, q url.Values) error {
	master, err := url.PathUnescape(path)
	if err != nil {
		return badField("master", "a '%%' that starts no escape (write it as %%25)")
	}
	c.Master = strings.Trim(master, "/")
	if scheme == "redis" || scheme == "rediss" {
		if c.DB, err = pathDB(c.Master, q); err != nil {
			return err
		}
		c.Master = ""
	}
	switch {
	case scheme == "sentinel" && c.Master == "":
		return badField("master", "sentinel:// needs the master name as the path, e.g. sentinel://s1:26379,s2:26379/mymaster")
	case scheme == "cluster" && c.Master != "":
		return badField("master", "cluster:// takes its nodes' addresses and no path")
	case scheme == "failover" && c.Master != "":
		name := c.Master
		if len(name) > echo.Max {
			name = "MASTER"
		}
		return badField("master", "failover:// takes the primary's address and no path; for a primary found through Sentinel use sentinel://s1:26379,s2:26379/%s", name)
	}
	return nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// setParam sets the field of one URL query parameter.
func (c *Config) setParam(name string, vals []string) error {
	f, ok := fieldByJSONName(name)
	if !ok || slices.Contains(urlParts, name) {
		return badField(echo.Quote(name), "unknown parameter")
	}
	if len(vals) != 1 {
		return badField(name, "given %d times", len(vals))
	}
	// Numbers go to JSON as they are, everything else as a string, so that
	// both forms accept exactly the same values.
	raw := strconv.Quote(vals[0])
	if f.Type.Kind() == reflect.Bool {
		b, err := strconv.ParseBool(vals[0])
		if err != nil {
			return badField(name, "%s is not true or false", echo.Quote(vals[0]))
		}
		raw = strconv.FormatBool(b)
	} else if describe(f.Type) != "a string" {
		if _, err := strconv.ParseFloat(vals[0], 64); err != nil {
			return badField(name, "%s is not a number", echo.Quote(vals[0]))
		}
		raw = vals[0]
	}
	return c.set(name, json.RawMessage(raw))
}

// URL returns the URL form of c, passwords included; ParseURL(c.URL())
// returns c for any valid c whose Addrs and Master contain no ',' or '/'.
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
	q := url.Values{}
	if c.Cluster {
		u.Scheme = "cluster"
		if c.Strategy != "single" {
			q.Set("strategy", c.Strategy)
		}
	}
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
	v := reflect.ValueOf(c)
	for _, f := range reflect.VisibleFields(v.Type()) {
		name, fv := jsonName(f), v.FieldByIndex(f.Index)
		if slices.Contains(urlParts, name) || fv.IsZero() {
			continue
		}
		b, err := json.Marshal(fv.Interface())
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
// without Master, unless Cluster is set).
func (c Config) Validate() error {
	for _, check := range []func() error{
		c.validateStrategy, c.validateAddrs, c.validateTLS, c.validateDurations, c.validateRenewal,
		c.validateStrategyOptions, c.validateFailover,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateStrategy checks that the strategy is known, and that no field
// that applies only to failover is set for another.
func (c Config) validateStrategy() error {
	if _, ok := builders[c.Strategy]; !ok {
		if c.Strategy == "" {
			return badField("strategy", "missing; one of %s", strategyNames())
		}
		return badField("strategy", "unknown strategy %s; one of %s", echo.Quote(c.Strategy), strategyNames())
	}
	if c.Strategy != "failover" {
		v := reflect.ValueOf(c)
		for _, f := range reflect.VisibleFields(v.Type()) {
			if name := jsonName(f); slices.Contains(failoverOnly, name) && !v.FieldByIndex(f.Index).IsZero() {
				return badField(name, "applies only to the failover strategy, not to %s", c.Strategy)
			}
		}
	}
	return nil
}

// validateAddrs checks each address, and that the addresses, Cluster,
// Master and the Sentinels' credentials fit the strategy and each other.
func (c Config) validateAddrs() error {
	for i, a := range c.Addrs {
		if a == "" {
			return badField("addrs", "address %d is empty", i)
		}
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return badField("addrs", "%s: want host:port, with an IPv6 host in brackets ([::1]:6379)", echo.Quote(a))
		}
		if slices.Index(c.Addrs, a) < i {
			return badField("addrs", "%s is given twice", echo.Bare(a))
		}
	}
	switch {
	case c.Cluster && c.Strategy != "single" && c.Strategy != "failover":
		return badField("cluster", "a Cluster runs single or failover, not %s (Redlock needs independent masters, not the masters of one Cluster)", c.Strategy)
	case c.Cluster && c.Master != "":
		return badField("master", "a Cluster is given by its nodes' addresses, not through Sentinel")
	case c.Strategy == "single" && len(c.Addrs) > 1 && !c.Cluster:
		return badField("addrs", "single takes one address, got %d (for a Redis Cluster: cluster://n1:7000,n2:7001)", len(c.Addrs))
	case c.Strategy == "failover" && c.Master == "" && len(c.Addrs) > 1 && !c.Cluster:
		return badField("addrs", "failover without master takes the primary's one address, got %d "+
			"(for a primary found through Sentinel: sentinel://s1,s2,s3/mymaster)", len(c.Addrs))
	case c.Master == "" && c.SentinelUsername != "":
		return badField("sentinel_username", "applies only through Sentinel (set master)")
	case c.Master == "" && c.SentinelPassword != "":
		return badField("sentinel_password", "applies only through Sentinel (set master)")
	}
	return nil
}

// validateDurations checks that no duration is negative, and that the
// TTL and MaxTTL are within dlm.MaxTTL and MaxTTL not below the TTL.
func (c Config) validateDurations() error {
	for _, d := range []struct {
		name string
		d    Duration
	}{{"ttl", c.TTL}, {"max_hold", c.MaxHold}, {"timeout", c.Timeout}, {"max_ttl", c.MaxTTL}} {
		if d.d < 0 {
			return badField(d.name, "%v is negative", time.Duration(d.d))
		}
	}
	if time.Duration(c.TTL) > dlm.MaxTTL {
		return badField("ttl", "%v is above %v", time.Duration(c.TTL), dlm.MaxTTL)
	}
	if time.Duration(c.MaxTTL) > dlm.MaxTTL {
		return badField("max_ttl", "%v is above %v", time.Duration(c.MaxTTL), dlm.MaxTTL)
	}
	if ttl := cmp.Or(time.Duration(c.TTL), dlm.DefaultTTL); c.MaxTTL > 0 && ttl > time.Duration(c.MaxTTL) {
		return badField("max_ttl", "%v is below the TTL %v", time.Duration(c.MaxTTL), ttl)
	}
	return nil
}

// validateRenewal checks Renew, and that MaxHold comes with it.
func (c Config) validateRenewal() error {
	if c.Renew != 0 && !(c.Renew > 0 && c.Renew < 1) {
		return badField("renew", "%v is not in (0, 1)", c.Renew)
	}
	if c.MaxHold > 0 && c.Renew == 0 {
		return badField("max_hold", "bounds auto-renewal: set renew too (e.g. renew=0.33)")
	}
	return nil
}

// validateStrategyOptions checks the ranges of the strategies' options.
func (c Config) validateStrategyOptions() error {
	if f := c.DriftFactor; f != nil && !(*f >= 0 && *f < 0.5) {
		return badField("drift_factor", "%v is not in [0, 0.5)", *f)
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
		return badField("wait_aof", "%s: want replicas or local", echo.Quote(c.WaitAOF))
	}
	return nil
}

// validateFailover checks, for failover, that WaitAOF waits for something
// and that the per-node timeout exceeds the wait's.
func (c Config) validateFailover() error {
	if c.Strategy != "failover" {
		return nil
	}
	none := c.Ack != nil && *c.Ack == strategy.AckNone()
	if none && c.WaitAOF == "replicas" {
		return badField("wait_aof", "replicas with ack none waits for nothing")
	}
	wt := time.Duration(c.WaitTimeout)
	if wt == 0 {
		wt = strategy.DefaultWaitTimeout
	}
	if c.Timeout > 0 && (!none || c.WaitAOF != "") && time.Duration(c.Timeout) <= wt {
		return badField("timeout", "%v must exceed the wait timeout %v", time.Duration(c.Timeout), wt)
	}
	return nil
}

// strategyOptions returns the strategy options c sets.
func (c Config) strategyOptions() []strategy.Option {
	var opts []strategy.Option
	if c.Timeout > 0 {
		opts = append(opts, strategy.WithTimeout(time.Duration(c.Timeout)))
	}
	if c.DriftFactor != nil {
		opts = append(opts, strategy.WithDriftFactor(*c.DriftFactor))
	}
	if c.MaxTTL > 0 {
		opts = append(opts, strategy.WithMaxTTL(time.Duration(c.MaxTTL)))
	}
	if c.Ack != nil {
		opts = append(opts, strategy.WithAcks(*c.Ack))
	}
	if c.WaitTimeout > 0 {
		opts = append(opts, strategy.WithWaitTimeout(time.Duration(c.WaitTimeout)))
	}
	if c.Replicas != nil {
		opts = append(opts, strategy.WithReplicas(*c.Replicas))
	}
	if c.WaitAOF != "" {
		opts = append(opts, strategy.WithWaitAOF(c.WaitAOF == "local"))
	}
	return opts
}

// ManagerOptions returns the Manager options c sets: dlm.WithTTL for TTL,
// and dlm.WithAutoRenew for Renew and MaxHold (no bound when MaxHold is 0).
func (c Config) ManagerOptions() []dlm.Option {
	var opts []dlm.Option
	if c.TTL > 0 {
		opts = append(opts, dlm.WithTTL(time.Duration(c.TTL)))
	}
	if c.Renew > 0 {
		maxHold := time.Duration(c.MaxHold)
		if maxHold == 0 {
			maxHold = math.MaxInt64
		}
		opts = append(opts, dlm.WithAutoRenew(c.Renew, maxHold))
	}
	return opts
}

// NewStrategy builds the configured strategy over nodes, which the caller
// built from Addrs with the driver of its choice (Open does that with a
// Dialer): for single one node, for redlock one per independent master (at
// least one, all distinct), for failover one node on the primary (through
// Sentinel when Master is set); with Cluster, one node over a Cluster
// client. It does not dial. Errors match
// dlm.ErrInvalid.
func (c Config) NewStrategy(nodes ...driver.Node) (driver.Strategy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return builders[c.Strategy](c, nodes)
}
