package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/strategy"
)

// The operator's commands: dlm ls, dlm inspect, dlm revoke.

const lsUsage = `usage: dlm ls [flags] [PATTERN]

Lists the locks held in the deployment whose keys match PATTERN (a Redis
glob: * ? [abc]; default *): key, owner, how long held, fence, remaining
TTL and waiting processes. It scans the servers (SCAN, in batches) and
reads each lock without changing it.
` + keyUsage

const inspectUsage = `usage: dlm inspect [flags] KEY

Shows who holds the lock KEY and since when, its fence, its remaining TTL,
how often it was renewed, how many processes wait for it, and what each
server holds (Redlock: whether a majority agrees). Changes nothing.
` + keyUsage

// keyUsage says how ls prints keys and how inspect and revoke take them.
const keyUsage = `
Keys in the text output are printed as they are when every character is
printable and none is a space or '"', else Go-quoted ("a\nb", "caf\xe9");
--json gives key (text; bytes that are not UTF-8 become U+FFFD) and key_b64
(the exact bytes, standard base64). To name a key that is not plain text,
give --key-quoted with the quoted form, or --key-b64 with key_b64, instead
of KEY.
`

const revokeUsage = `usage: dlm revoke [flags] --reason WHY KEY

Takes the lock KEY away from whoever holds it: deletes it on every server,
advances its fence (the next holder's fence is above the revoked one's, so
fenced storage refuses the revoked holder's writes once the next holder has
written), and leaves a note that makes the holder's next renewal fail with
"revoked" (its Context ends then). Waiters are woken. Who revoked it and why
are logged on standard error and kept beside the key for dlm inspect.
Exit status 1 when no lock was held, 75 when too few servers answered to
tell (the state is unknown: the lock may still be held).
` + keyUsage

// operator holds what the three commands share: the strategy over the
// deployment and the go-redis clients that scan it.
type operator struct {
	cfg     config.Config
	s       driver.Strategy
	clients []any // *redis.Client or *redis.ClusterClient, one per endpoint
	close   io.Closer
}

// openOperator opens the deployment the flags name.
func openOperator(ctx context.Context, tf targetFlags) (*operator, error) {
	cfg, err := tf.load()
	if err != nil {
		return nil, err
	}
	if *tf.driver != "goredis" { // its clients scan the deployment
		return nil, fmt.Errorf("--driver %s: the operator commands work over goredis only", *tf.driver)
	}
	op := &operator{cfg: cfg}
	s, closer, err := cfg.OpenStrategy(ctx, func(ctx context.Context, ep config.Endpoint) (driver.Node, io.Closer, error) {
		n, c, err := goredis.Dial(ctx, ep)
		if err == nil {
			op.clients = append(op.clients, c)
		}
		return n, c, err
	})
	if err != nil {
		return nil, err
	}
	op.s, op.close = s, closer
	return op, nil
}

// operatorFlags parses the flags of an operator command.
func operatorFlags(name, usage string, args []string, stderr io.Writer, extra func(fs *flag.FlagSet)) (*flag.FlagSet, targetFlags, *bool, error) {
	fs := flag.NewFlagSet("dlm "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage+"\n"+targetUsage(defaultURL)+"\nflags:\n"); fs.PrintDefaults() }
	tf := addTargetFlags(fs, defaultURL)
	asJSON := fs.Bool("json", false, "print JSON")
	if extra != nil {
		extra(fs)
	}
	return fs, tf, asJSON, fs.Parse(args)
}

func lsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, tf, asJSON, err := operatorFlags("ls", lsUsage, args, stderr, nil)
	if err != nil {
		return parseExit(err)
	}
	pattern := "*"
	switch fs.NArg() {
	case 0:
	case 1:
		pattern = fs.Arg(0)
	default:
		fmt.Fprintln(stderr, "dlm ls: at most one PATTERN")
		return 2
	}
	match, err := globRegexp(pattern)
	if err != nil {
		fmt.Fprintf(stderr, "dlm ls: %v\n", err)
		return 2
	}
	op, err := openOperator(ctx, tf)
	if err != nil {
		fmt.Fprintf(stderr, "dlm ls: %v\n", err)
		return 2
	}
	defer op.close.Close()
	keys, err := op.scan(ctx, match)
	if err != nil {
		fmt.Fprintf(stderr, "dlm ls: %v%s\n", err, dbHint(op.cfg.DB, err))
		return exitFor(err)
	}
	var held []inspect.Info
	for _, k := range keys {
		info, err := inspect.Key(ctx, op.s, k)
		if err != nil {
			fmt.Fprintf(stderr, "dlm ls: %s: %v%s\n", displayKey(k), err, dbHint(op.cfg.DB, err))
			return exitFor(err)
		}
		if info.Held {
			held = append(held, info)
		}
	}
	if *asJSON {
		return printJSON(stdout, stderr, lsJSON(held))
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tHELD FOR\tFENCE\tTTL LEFT\tWAITING")
	for _, in := range held {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%d\n", displayKey(in.Key), displayText(owner(in)), heldFor(in, now), in.Fence, round(in.Remaining), in.Waiters)
	}
	_ = tw.Flush()
	if len(held) == 0 {
		fmt.Fprintf(stderr, "dlm ls: no lock matching %s is held\n", quoteInput(pattern))
	}
	return 0
}

func inspectCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var kf keyFlags
	fs, tf, asJSON, err := operatorFlags("inspect", inspectUsage, args, stderr, kf.add)
	if err != nil {
		return parseExit(err)
	}
	key, err := keyArg(fs.Args(), *kf.b64, *kf.quoted)
	if err != nil {
		fmt.Fprintf(stderr, "dlm inspect: %v (dlm inspect -h)\n", err)
		return 2
	}
	op, err := openOperator(ctx, tf)
	if err != nil {
		fmt.Fprintf(stderr, "dlm inspect: %v\n", err)
		return 2
	}
	defer op.close.Close()
	info, err := inspect.Key(ctx, op.s, key)
	if err != nil {
		fmt.Fprintf(stderr, "dlm inspect: %v%s\n", err, dbHint(op.cfg.DB, err))
		return exitFor(err)
	}
	if *asJSON {
		return printJSON(stdout, stderr, inspectJSON(info, time.Now()))
	}
	printInfo(stdout, info, time.Now())
	return 0
}

func revokeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var reason, by *string
	var kf keyFlags
	fs, tf, asJSON, err := operatorFlags("revoke", revokeUsage, args, stderr, func(fs *flag.FlagSet) {
		reason = fs.String("reason", "", "why the lock is revoked (required; logged and kept beside the key)")
		by = fs.String("by", whoAmI(), "who revokes it")
		kf.add(fs)
	})
	if err != nil {
		return parseExit(err)
	}
	key, err := keyArg(fs.Args(), *kf.b64, *kf.quoted)
	if err == nil && *reason == "" {
		err = errors.New("--reason is required")
	}
	if err != nil {
		fmt.Fprintf(stderr, "dlm revoke: %v (dlm revoke -h)\n", err)
		return 2
	}
	op, err := openOperator(ctx, tf)
	if err != nil {
		fmt.Fprintf(stderr, "dlm revoke: %v\n", err)
		return 2
	}
	defer op.close.Close()
	info, err := inspect.Revoke(ctx, op.s, key, *by, *reason)
	if errors.Is(err, dlm.ErrStateUnknown) {
		fmt.Fprintf(stderr, "dlm revoke: %q: state unknown: %v\n", key, err)
		return exitNotLocked
	}
	if err != nil {
		fmt.Fprintf(stderr, "dlm revoke: %v%s\n", err, dbHint(op.cfg.DB, err))
		return exitFor(err)
	}
	fmt.Fprintf(stderr, "dlm revoke: %s %q held by %s (fence %d) revoked by %s: %s\n",
		time.Now().UTC().Format(time.RFC3339), key, displayText(owner(info)), info.Fence, displayText(*by), displayText(*reason))
	if *asJSON {
		return printJSON(stdout, stderr, inspectJSON(info, time.Now()))
	}
	fmt.Fprintf(stdout, "revoked %s (held by %s, fence %d)\n", displayKey(key), displayText(owner(info)), info.Fence)
	return 0
}

// keyFlags are the ways inspect and revoke take a key besides KEY.
type keyFlags struct{ b64, quoted *string }

func (k *keyFlags) add(fs *flag.FlagSet) {
	k.b64 = fs.String("key-b64", "", "the key as standard base64 (key_b64 in --json), instead of KEY")
	k.quoted = fs.String("key-quoted", "", `the key Go-quoted, as dlm ls prints one that is not plain text ("a\nb"), instead of KEY`)
}

// exitFor is the exit status after err: 2 for bad input (a db the server
// does not have included), else 1.
func exitFor(err error) int {
	if errors.Is(err, dlm.ErrInvalid) || errors.Is(err, errors.ErrUnsupported) || dbOutOfRange(err) {
		return 2
	}
	return 1
}

// whoAmI is the default revoker: "USER@HOST".
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// scan lists the lock keys in the deployment that match, sorted.
func (op *operator) scan(ctx context.Context, match *regexp.Regexp) ([]string, error) {
	var mu sync.Mutex // a Cluster's masters are scanned at once
	seen := map[string]bool{}
	each := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, strategy.LockPattern, 1000).Iterator()
		for iter.Next(ctx) {
			if k, ok := strategy.KeyOf(iter.Val()); ok && match.MatchString(k) {
				mu.Lock()
				seen[k] = true
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	for _, c := range op.clients {
		var err error
		switch c := c.(type) {
		case *redis.Client:
			err = each(ctx, c)
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, each)
		}
		if err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// globRegexp compiles a Redis glob (* ? [set] [^set] \x) to a regexp.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString("(?s:.*)")
		case '?':
			b.WriteString("(?s:.)")
		case '[':
			j := strings.IndexByte(glob[i+1:], ']')
			if j < 0 {
				return nil, fmt.Errorf("pattern %s: '[' without ']'", quoteInput(glob))
			}
			set := glob[i+1 : i+1+j]
			if strings.HasPrefix(set, "^") {
				set = "^" + regexp.QuoteMeta(set[1:])
			} else {
				set = regexp.QuoteMeta(set)
			}
			b.WriteString("[" + strings.ReplaceAll(set, `\-`, "-") + "]")
			i += j + 1
		case '\\':
			if i+1 < len(glob) {
				i++
			}
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// owner names the holder of a held lock.
func owner(in inspect.Info) string {
	if in.HolderOK {
		return in.Holder.Owner
	}
	return "(unknown: token " + shortToken(in.Token) + ")"
}

func shortToken(t string) string {
	if len(t) > 12 {
		return t[:12] + "…"
	}
	return t
}

// heldFor is how long the holder has held the lock, when its token says.
func heldFor(in inspect.Info, now time.Time) string {
	if !in.HolderOK {
		return "?"
	}
	return round(now.Sub(in.Holder.Since)).String()
}

// renewals returns how many times at least the lock must have been renewed
// to be held now with remaining left, and how long ago the last renewal
// was; ok is false when its token does not say, or when it was not renewed.
func renewals(in inspect.Info, now time.Time) (atLeast int, last time.Duration, ok bool) {
	h := in.Holder
	if !in.HolderOK || h.TTL <= 0 {
		return 0, 0, false
	}
	// Unrenewed, the lock would end at Since+TTL; each renewal moves its
	// end less than one TTL further.
	extended := now.Add(in.Remaining).Sub(h.Since.Add(h.TTL))
	if extended <= h.TTL/100 { // the clocks of holder and operator differ a little
		return 0, 0, false
	}
	return int((extended + h.TTL - 1) / h.TTL), max(h.TTL-in.Remaining, 0), true
}

// printInfo prints what Inspect found, for people.
func printInfo(w io.Writer, in inspect.Info, now time.Time) {
	fmt.Fprintf(w, "key:       %s\n", displayKey(in.Key))
	if !in.Held {
		fmt.Fprintf(w, "held:      no\n")
	} else {
		fmt.Fprintf(w, "held:      yes, by %s\n", displayText(owner(in)))
		if in.HolderOK {
			fmt.Fprintf(w, "since:     %s (%s ago, the holder's clock)\n", in.Holder.Since.UTC().Format(time.RFC3339Nano), round(now.Sub(in.Holder.Since)))
			fmt.Fprintf(w, "lease:     %v TTL, %v left\n", in.Holder.TTL, round(in.Remaining))
			if n, last, ok := renewals(in, now); ok {
				fmt.Fprintf(w, "renewals:  at least %d, the last %v ago\n", n, round(last))
			} else {
				fmt.Fprintf(w, "renewals:  none yet\n")
			}
		} else {
			fmt.Fprintf(w, "lease:     %v left\n", round(in.Remaining))
		}
		fmt.Fprintf(w, "fence:     %d\n", in.Fence)
	}
	fmt.Fprintf(w, "waiting:   %d processes\n", in.Waiters)
	if len(in.Nodes) > 1 {
		agree := 0
		for _, n := range in.Nodes {
			if n.Err == nil && in.Held && n.Token == in.Token {
				agree++
			}
		}
		fmt.Fprintf(w, "quorum:    %d of %d nodes hold it for one token (majority %d)\n", agree, len(in.Nodes), len(in.Nodes)/2+1)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHOLDS\tFENCE\tTTL LEFT\tCOUNTER\tWAITING")
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\terror: %v\t\t\t\t\n", n.Node, n.Err)
			continue
		}
		holds := "-"
		if n.Token != "" {
			holds = shortToken(n.Token)
			if n.Token == in.Token {
				holds = "the holder's token"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d\t%d\n", n.Node, holds, n.Fence, round(n.TTL), n.Counter, n.Waiters)
	}
	_ = tw.Flush()
	for _, n := range in.Nodes {
		if r := n.Revoked; r != nil {
			who := shortToken(r.Token)
			if h, ok := inspect.HolderOf(r.Token); ok {
				who = h.Owner
			}
			fmt.Fprintf(w, "revoked on %s: %s's lock, %s ago, by %s: %s\n", n.Node, displayText(who), round(now.Sub(r.At)), displayText(r.By), displayText(r.Reason))
		}
	}
}

// The JSON forms of ls and inspect.
type nodeJSON struct {
	Node      string              `json:"node"`
	Error     string              `json:"error,omitempty"`
	Token     string              `json:"token,omitempty"`
	Fence     uint64              `json:"fence,omitempty"`
	TTLMillis int64               `json:"ttl_ms"`
	Counter   uint64              `json:"counter"`
	Waiters   int                 `json:"waiters"`
	Revoked   *inspect.Revocation `json:"revoked,omitempty"`
}

type infoJSON struct {
	Key         string     `json:"key"`     // as text: bytes that are not UTF-8 become U+FFFD
	KeyB64      string     `json:"key_b64"` // the key's bytes exactly, standard base64 (--key-b64)
	Held        bool       `json:"held"`
	Owner       string     `json:"owner,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	LeaseMillis int64      `json:"lease_ttl_ms,omitempty"`
	TTLMillis   int64      `json:"ttl_ms"`
	Fence       uint64     `json:"fence,omitempty"`
	Renewals    *int       `json:"renewals_at_least,omitempty"`
	Waiters     int        `json:"waiters"`
	Token       string     `json:"token,omitempty"`
	Nodes       []nodeJSON `json:"nodes,omitempty"`
}

func inspectJSON(in inspect.Info, now time.Time) infoJSON {
	j := infoJSON{Key: in.Key, KeyB64: base64.StdEncoding.EncodeToString([]byte(in.Key)), Held: in.Held, TTLMillis: in.Remaining.Milliseconds(), Fence: in.Fence, Waiters: in.Waiters, Token: in.Token}
	if in.HolderOK {
		since := in.Holder.Since.UTC()
		j.Owner, j.Since, j.LeaseMillis = in.Holder.Owner, &since, in.Holder.TTL.Milliseconds()
		n, _, _ := renewals(in, now)
		j.Renewals = &n
	}
	for _, n := range in.Nodes {
		nj := nodeJSON{Node: n.Node, Token: n.Token, Fence: n.Fence, TTLMillis: n.TTL.Milliseconds(), Counter: n.Counter, Waiters: n.Waiters, Revoked: n.Revoked}
		if n.Err != nil {
			nj.Error = n.Err.Error()
		}
		j.Nodes = append(j.Nodes, nj)
	}
	return j
}

func lsJSON(held []inspect.Info) []infoJSON {
	out := make([]infoJSON, 0, len(held))
	now := time.Now()
	for _, in := range held {
		j := inspectJSON(in, now)
		j.Nodes = nil
		out = append(out, j)
	}
	return out
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "dlm: %v\n", err)
		return 1
	}
	return 0
}
