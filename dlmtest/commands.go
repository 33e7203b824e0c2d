package dlmtest

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Replies of commands, in the shapes Redis gives them: int64 (integer),
// string (bulk), nil (nil bulk), []any (array), status and replyError.
type (
	status     string
	replyError string // the whole reply: "CODE message"
)

const (
	errWrongType = replyError("WRONGTYPE Operation against a key holding the wrong kind of value")
	errNotInt    = replyError("ERR value is not an integer or out of range")
	errNotFloat  = replyError("ERR value is not a valid float")
	errSyntax    = replyError("ERR syntax error")
	statusOK     = status("OK")
)

type kind uint8

const (
	kindString kind = iota + 1
	kindHash
	kindZSet
	kindList
)

// A value is what a key holds.
type value struct {
	kind     kind
	str      string
	hash     map[string]string
	zset     map[string]float64
	list     []string
	expireAt int64 // unix ms by the server's clock; 0: no TTL
}

func (v *value) clone() *value {
	c := *v
	c.hash = cloneHash(v.hash)
	if v.zset != nil {
		c.zset = make(map[string]float64, len(v.zset))
		for k, s := range v.zset {
			c.zset[k] = s
		}
	}
	c.list = slices.Clone(v.list)
	return &c
}

func cloneHash(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// A command is one Redis command dlmtest implements.
type command struct {
	arity int  // as Redis counts it: the name included; negative: at least
	write bool // replicated (its keys are copied to replicas)
	run   func(sv *server, args []string) any
}

// commands is the command set dlmtest implements; every other command is
// answered "ERR unknown command", so that a script that starts using one
// fails loudly in tests. Keep the package documentation's list in step.
var commands map[string]command

func init() {
	commands = map[string]command{
		"get":           {2, false, cmdGet},
		"set":           {-3, true, cmdSet},
		"del":           {-2, true, cmdDel},
		"exists":        {-2, false, cmdExists},
		"incr":          {2, true, func(sv *server, a []string) any { return incrBy(sv, a[1], "1") }},
		"incrby":        {3, true, func(sv *server, a []string) any { return incrBy(sv, a[1], a[2]) }},
		"decr":          {2, true, func(sv *server, a []string) any { return incrBy(sv, a[1], "-1") }},
		"pexpire":       {-3, true, func(sv *server, a []string) any { return expire(sv, a, 1, false) }},
		"expire":        {-3, true, func(sv *server, a []string) any { return expire(sv, a, 1000, false) }},
		"pexpireat":     {-3, true, func(sv *server, a []string) any { return expire(sv, a, 1, true) }},
		"pttl":          {2, false, func(sv *server, a []string) any { return ttl(sv, a[1], 1) }},
		"ttl":           {2, false, func(sv *server, a []string) any { return ttl(sv, a[1], 1000) }},
		"persist":       {2, true, cmdPersist},
		"time":          {1, false, cmdTime},
		"info":          {-1, false, cmdInfo},
		"ping":          {-1, false, func(*server, []string) any { return status("PONG") }},
		"publish":       {3, false, func(sv *server, a []string) any { return sv.publish(a[1], a[2], false) }},
		"spublish":      {3, false, func(sv *server, a []string) any { return sv.publish(a[1], a[2], true) }},
		"pubsub":        {-2, false, cmdPubsub},
		"hset":          {-4, true, cmdHSet},
		"hget":          {3, false, cmdHGet},
		"hmget":         {-3, false, cmdHMGet},
		"hdel":          {-3, true, cmdHDel},
		"hgetall":       {2, false, cmdHGetAll},
		"zadd":          {-4, true, cmdZAdd},
		"zrem":          {-3, true, cmdZRem},
		"zscore":        {3, false, cmdZScore},
		"zrank":         {3, false, cmdZRank},
		"zcard":         {2, false, cmdZCard},
		"zrange":        {-4, false, cmdZRange},
		"zrangebyscore": {-4, false, cmdZRangeByScore},
		"rpush":         {-3, true, cmdRPush},
		"llen":          {2, false, cmdLLen},
		"flushall":      {-1, true, cmdFlush},
		"flushdb":       {-1, true, cmdFlush},
	}
}

// Commands returns the names of the commands a Server implements, in
// upper case and sorted: scripts may call these (and EVAL, EVALSHA and
// WAIT reach the server through a Node); any other is answered with an
// error reply "ERR unknown command".
func Commands() []string {
	var names []string
	for n := range commands {
		names = append(names, strings.ToUpper(n))
	}
	slices.Sort(names)
	return names
}

// do runs one command on sv (the caller holds the server).
func (sv *server) do(args []string) any {
	if len(args) == 0 {
		return replyError("ERR wrong number of arguments")
	}
	name := strings.ToLower(args[0])
	cmd, ok := commands[name]
	if !ok {
		return replyError(fmt.Sprintf("ERR unknown command '%s': dlmtest does not implement it (see dlmtest.Commands)", args[0]))
	}
	if cmd.arity > 0 && len(args) != cmd.arity || cmd.arity < 0 && len(args) < -cmd.arity {
		return replyError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
	}
	sv.stats[name]++
	return cmd.run(sv, args)
}

func (sv *server) nowMS() int64 { return sv.clock.Now().UnixMilli() }

// lookup returns key's value, nil when it is missing or expired by the
// server's clock (an expired key is deleted, as Redis does on access).
func (sv *server) lookup(key string) *value {
	v := sv.data[key]
	if v == nil {
		return nil
	}
	if v.expireAt != 0 && sv.nowMS() >= v.expireAt {
		delete(sv.data, key)
		sv.touch(key)
		return nil
	}
	return v
}

// touch marks key written, for replication.
func (sv *server) touch(key string) {
	if sv.dirty != nil {
		sv.dirty[key] = struct{}{}
	}
}

func (sv *server) put(key string, v *value) {
	sv.data[key] = v
	sv.touch(key)
}

func (sv *server) del(key string) bool {
	if sv.lookup(key) == nil {
		return false
	}
	delete(sv.data, key)
	sv.touch(key)
	return true
}

// typed returns key's value when it has kind k (nil when missing), or
// WRONGTYPE.
func (sv *server) typed(key string, k kind) (*value, any) {
	v := sv.lookup(key)
	if v != nil && v.kind != k {
		return nil, errWrongType
	}
	return v, nil
}

func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func cmdGet(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindString)
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	return v.str
}

func cmdSet(sv *server, a []string) any {
	key, val := a[1], a[2]
	var nx, xx, get, keep bool
	var at int64 // absolute expiry in ms, 0 none
	for i := 3; i < len(a); i++ {
		switch opt := strings.ToUpper(a[i]); opt {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GET":
			get = true
		case "KEEPTTL":
			keep = true
		case "EX", "PX", "EXAT", "PXAT":
			if i+1 >= len(a) || at != 0 {
				return errSyntax
			}
			i++
			n, ok := parseInt(a[i])
			if !ok {
				return errNotInt
			}
			if n <= 0 {
				return replyError("ERR invalid expire time in 'set' command")
			}
			switch opt {
			case "EX":
				at = sv.nowMS() + n*1000
			case "PX":
				at = sv.nowMS() + n
			case "EXAT":
				at = n * 1000
			default:
				at = n
			}
		default:
			return errSyntax
		}
	}
	if nx && xx || keep && at != 0 {
		return errSyntax
	}
	old := sv.lookup(key)
	var reply any = statusOK
	if get {
		switch {
		case old == nil:
			reply = nil
		case old.kind != kindString:
			return errWrongType
		default:
			reply = old.str
		}
	}
	if nx && old != nil || xx && old == nil {
		if get {
			return reply
		}
		return nil
	}
	nv := &value{kind: kindString, str: val, expireAt: at}
	if keep && old != nil {
		nv.expireAt = old.expireAt
	}
	sv.put(key, nv)
	return reply
}

func cmdDel(sv *server, a []string) any {
	var n int64
	for _, k := range a[1:] {
		if sv.del(k) {
			n++
		}
	}
	return n
}

func cmdExists(sv *server, a []string) any {
	var n int64
	for _, k := range a[1:] {
		if sv.lookup(k) != nil {
			n++
		}
	}
	return n
}

func incrBy(sv *server, key, by string) any {
	d, ok := parseInt(by)
	if !ok {
		return errNotInt
	}
	v, err := sv.typed(key, kindString)
	if err != nil {
		return err
	}
	var cur int64
	if v != nil {
		if cur, ok = parseInt(v.str); !ok {
			return errNotInt
		}
	}
	if d > 0 && cur > math.MaxInt64-d || d < 0 && cur < math.MinInt64-d {
		return replyError("ERR increment or decrement would overflow")
	}
	cur += d
	nv := &value{kind: kindString, str: strconv.FormatInt(cur, 10)}
	if v != nil {
		nv.expireAt = v.expireAt
	}
	sv.put(key, nv)
	return cur
}

// expire is PEXPIRE (unit 1), EXPIRE (unit 1000) and PEXPIREAT (abs).
func expire(sv *server, a []string, unit int64, abs bool) any {
	n, ok := parseInt(a[2])
	if !ok {
		return errNotInt
	}
	var nx, xx, gt, lt bool
	for _, o := range a[3:] {
		switch strings.ToUpper(o) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			return replyError("ERR Unsupported option " + o)
		}
	}
	v := sv.lookup(a[1])
	if v == nil {
		return int64(0)
	}
	at := n * unit
	if !abs {
		at += sv.nowMS()
	}
	switch {
	case nx && v.expireAt != 0, xx && v.expireAt == 0,
		gt && (v.expireAt == 0 || at <= v.expireAt), lt && v.expireAt != 0 && at >= v.expireAt:
		return int64(0)
	}
	if at <= sv.nowMS() {
		sv.del(a[1])
		return int64(1)
	}
	nv := v.clone()
	nv.expireAt = at
	sv.put(a[1], nv)
	return int64(1)
}

func ttl(sv *server, key string, unit int64) any {
	v := sv.lookup(key)
	switch {
	case v == nil:
		return int64(-2)
	case v.expireAt == 0:
		return int64(-1)
	}
	ms := v.expireAt - sv.nowMS()
	return (ms + unit/2) / unit
}

func cmdPersist(sv *server, a []string) any {
	v := sv.lookup(a[1])
	if v == nil || v.expireAt == 0 {
		return int64(0)
	}
	nv := v.clone()
	nv.expireAt = 0
	sv.put(a[1], nv)
	return int64(1)
}

func cmdTime(sv *server, _ []string) any {
	us := sv.clock.Now().UnixMicro()
	return []any{strconv.FormatInt(us/1e6, 10), strconv.FormatInt(us%1e6, 10)}
}

func cmdPubsub(sv *server, a []string) any {
	sub := strings.ToUpper(a[1])
	switch sub {
	case "NUMSUB", "SHARDNUMSUB":
		var out []any
		for _, ch := range a[2:] {
			out = append(out, ch, sv.owner.numsub(ch, sub == "SHARDNUMSUB"))
		}
		if out == nil {
			out = []any{}
		}
		return out
	}
	return replyError("ERR unknown subcommand '" + a[1] + "': dlmtest implements PUBSUB NUMSUB and SHARDNUMSUB")
}

func cmdHSet(sv *server, a []string) any {
	if len(a)%2 != 0 {
		return replyError("ERR wrong number of arguments for 'hset' command")
	}
	v, err := sv.typed(a[1], kindHash)
	if err != nil {
		return err
	}
	nv := &value{kind: kindHash, hash: map[string]string{}}
	if v != nil {
		nv = v.clone()
	}
	var added int64
	for i := 2; i < len(a); i += 2 {
		if _, ok := nv.hash[a[i]]; !ok {
			added++
		}
		nv.hash[a[i]] = a[i+1]
	}
	sv.put(a[1], nv)
	return added
}

func cmdHGet(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindHash)
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	if s, ok := v.hash[a[2]]; ok {
		return s
	}
	return nil
}

func cmdHMGet(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindHash)
	if err != nil {
		return err
	}
	out := make([]any, 0, len(a)-2)
	for _, f := range a[2:] {
		if s, ok := v.fieldOf(f); ok {
			out = append(out, s)
		} else {
			out = append(out, nil)
		}
	}
	return out
}

func (v *value) fieldOf(f string) (string, bool) {
	if v == nil {
		return "", false
	}
	s, ok := v.hash[f]
	return s, ok
}

func cmdHDel(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindHash)
	if err != nil || v == nil {
		return cmp.Or(err, any(int64(0)))
	}
	nv := v.clone()
	var n int64
	for _, f := range a[2:] {
		if _, ok := nv.hash[f]; ok {
			delete(nv.hash, f)
			n++
		}
	}
	if len(nv.hash) == 0 {
		sv.del(a[1])
	} else {
		sv.put(a[1], nv)
	}
	return n
}

func cmdHGetAll(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindHash)
	if err != nil {
		return err
	}
	out := []any{}
	if v != nil {
		keys := make([]string, 0, len(v.hash))
		for k := range v.hash {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			out = append(out, k, v.hash[k])
		}
	}
	return out
}

func parseScore(s string) (float64, bool) {
	switch strings.ToLower(s) {
	case "+inf", "inf":
		return math.Inf(1), true
	case "-inf":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && !math.IsNaN(f)
}

func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

func cmdZAdd(sv *server, a []string) any {
	i := 2
	var nx, xx, gt, lt, ch bool
	for ; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		case "CH":
			ch = true
		default:
			goto pairs
		}
	}
pairs:
	rest := a[i:]
	if len(rest) == 0 || len(rest)%2 != 0 || nx && (xx || gt || lt) || gt && lt {
		return errSyntax
	}
	v, err := sv.typed(a[1], kindZSet)
	if err != nil {
		return err
	}
	nv := &value{kind: kindZSet, zset: map[string]float64{}}
	if v != nil {
		nv = v.clone()
	}
	var added, changed int64
	for j := 0; j < len(rest); j += 2 {
		score, ok := parseScore(rest[j])
		if !ok {
			return errNotFloat
		}
		m := rest[j+1]
		old, exists := nv.zset[m]
		switch {
		case exists && (nx || gt && score <= old || lt && score >= old):
			continue
		case !exists && xx:
			continue
		}
		if !exists {
			added++
		} else if old != score {
			changed++
		}
		nv.zset[m] = score
	}
	if len(nv.zset) > 0 {
		sv.put(a[1], nv)
	}
	if ch {
		return added + changed
	}
	return added
}

func cmdZRem(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindZSet)
	if err != nil || v == nil {
		return cmp.Or(err, any(int64(0)))
	}
	nv := v.clone()
	var n int64
	for _, m := range a[2:] {
		if _, ok := nv.zset[m]; ok {
			delete(nv.zset, m)
			n++
		}
	}
	if n > 0 {
		if len(nv.zset) == 0 {
			sv.del(a[1])
		} else {
			sv.put(a[1], nv)
		}
	}
	return n
}

func cmdZScore(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindZSet)
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	if s, ok := v.zset[a[2]]; ok {
		return formatScore(s)
	}
	return nil
}

// sorted returns a sorted set's members by score, then member.
func (v *value) sorted() []string {
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.zset))
	for m := range v.zset {
		out = append(out, m)
	}
	slices.SortFunc(out, func(x, y string) int {
		if c := cmp.Compare(v.zset[x], v.zset[y]); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	return out
}

func cmdZRank(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindZSet)
	if err != nil {
		return err
	}
	if i := slices.Index(v.sorted(), a[2]); i >= 0 {
		return int64(i)
	}
	return nil
}

func cmdZCard(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindZSet)
	if err != nil || v == nil {
		return cmp.Or(err, any(int64(0)))
	}
	return int64(len(v.zset))
}

func withScores(v *value, ms []string, scores bool) []any {
	out := []any{}
	for _, m := range ms {
		out = append(out, m)
		if scores {
			out = append(out, formatScore(v.zset[m]))
		}
	}
	return out
}

func cmdZRange(sv *server, a []string) any {
	start, ok1 := parseInt(a[2])
	stop, ok2 := parseInt(a[3])
	if !ok1 || !ok2 {
		return errNotInt
	}
	scores := false
	for _, o := range a[4:] {
		if !strings.EqualFold(o, "WITHSCORES") {
			return replyError("ERR dlmtest implements ZRANGE by index only, with WITHSCORES")
		}
		scores = true
	}
	v, err := sv.typed(a[1], kindZSet)
	if err != nil {
		return err
	}
	ms := v.sorted()
	n := int64(len(ms))
	if start < 0 {
		start = max(n+start, 0)
	}
	if stop < 0 {
		stop = n + stop
	}
	stop = min(stop, n-1)
	if start > stop {
		return []any{}
	}
	return withScores(v, ms[start:stop+1], scores)
}

// scoreBound parses a ZRANGEBYSCORE bound: a score, "(score", ±inf.
func scoreBound(s string) (f float64, excl, ok bool) {
	if strings.HasPrefix(s, "(") {
		excl, s = true, s[1:]
	}
	f, ok = parseScore(s)
	return f, excl, ok
}

func cmdZRangeByScore(sv *server, a []string) any {
	lo, loX, ok1 := scoreBound(a[2])
	hi, hiX, ok2 := scoreBound(a[3])
	if !ok1 || !ok2 {
		return replyError("ERR min or max is not a float")
	}
	scores, off, count := false, int64(0), int64(-1)
	for i := 4; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "WITHSCORES":
			scores = true
		case "LIMIT":
			if i+2 >= len(a) {
				return errSyntax
			}
			var ok3, ok4 bool
			off, ok3 = parseInt(a[i+1])
			count, ok4 = parseInt(a[i+2])
			if !ok3 || !ok4 {
				return errNotInt
			}
			i += 2
		default:
			return errSyntax
		}
	}
	v, err := sv.typed(a[1], kindZSet)
	if err != nil {
		return err
	}
	var ms []string
	for _, m := range v.sorted() {
		s := v.zset[m]
		if s < lo || loX && s == lo || s > hi || hiX && s == hi {
			continue
		}
		ms = append(ms, m)
	}
	if off < 0 || off >= int64(len(ms)) {
		return []any{}
	}
	ms = ms[off:]
	if count >= 0 && count < int64(len(ms)) {
		ms = ms[:count]
	}
	return withScores(v, ms, scores)
}

func cmdRPush(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindList)
	if err != nil {
		return err
	}
	nv := &value{kind: kindList}
	if v != nil {
		nv = v.clone()
	}
	nv.list = append(nv.list, a[2:]...)
	sv.put(a[1], nv)
	return int64(len(nv.list))
}

func cmdLLen(sv *server, a []string) any {
	v, err := sv.typed(a[1], kindList)
	if err != nil || v == nil {
		return cmp.Or(err, any(int64(0)))
	}
	return int64(len(v.list))
}

func cmdFlush(sv *server, _ []string) any {
	for k := range sv.data {
		sv.touch(k)
	}
	clear(sv.data)
	return statusOK
}

// cmdInfo answers INFO with the fields dlm's scripts and the conformance
// suite read, each section as Redis formats it.
func cmdInfo(sv *server, a []string) any {
	sections := []string{"server", "replication", "persistence", "stats", "cluster", "keyspace"}
	if len(a) > 1 {
		sections = nil
		for _, s := range a[1:] {
			s = strings.ToLower(s)
			switch s {
			case "all", "everything", "default":
				sections = append(sections, "server", "replication", "persistence", "stats", "commandstats", "cluster", "keyspace")
			default:
				sections = append(sections, s)
			}
		}
	}
	var b strings.Builder
	for _, s := range sections {
		sv.infoSection(&b, s)
	}
	return b.String()
}
