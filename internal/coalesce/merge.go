package coalesce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Merging: calls of the scripts a Node was given, bound for one server, run
// as one call of a batch script that runs each of them in turn — one script
// invocation instead of many, which is what a server spends most of its
// time on for small scripts. Each call keeps its own keys, arguments and
// reply; a call that raises an error inside the batch is sent again by
// itself, so that its caller gets the server's error and the others in the
// batch are not affected. Which calls may share a script the node says
// (nodekit.Router): any, on one server; those of one hash slot, on a Redis
// Cluster; none, when the node does not say.

// maxMerge bounds the calls one batch script runs, and so how long it keeps
// the server busy.
const maxMerge = 64

// batchLua runs ARGV[1] calls: for each, ARGV holds the function's number in
// F, its key count and argument count, then its arguments; KEYS holds every
// call's keys in turn. The reply holds, for each call, the length of its
// reply and then its reply, or -1 when it raised an error.
const batchLua = `
local out, k, a = {}, 1, 2
for _ = 1, tonumber(ARGV[1]) do
  local f, nk, na = F[tonumber(ARGV[a])], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local keys, args = {}, {}
  for i = 1, nk do keys[i] = KEYS[k + i - 1] end
  for i = 1, na do args[i] = ARGV[a + i - 1] end
  k, a = k + nk, a + na
  local ok, r = pcall(f, keys, args)
  if ok and type(r) == 'table' then
    out[#out + 1] = #r
    for i = 1, #r do out[#out + 1] = r[i] end
  else
    out[#out + 1] = -1
  end
end
return out
`

// merger builds batch script calls from calls of its scripts.
type merger struct {
	batch *nodekit.Script
	fn    map[string]string // a script's SHA1, and its source, → its number in the batch script, as text
}

func newMerger(scripts []*nodekit.Script) *merger {
	if len(scripts) == 0 {
		return nil
	}
	m := &merger{fn: make(map[string]string, len(scripts))}
	var b strings.Builder
	b.WriteString("local F = {}\n")
	for i, s := range scripts {
		fmt.Fprintf(&b, "F[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, s.Source())
		m.fn[s.SHA1()] = strconv.Itoa(i + 1)
		m.fn[s.Source()] = m.fn[s.SHA1()]
	}
	b.WriteString(batchLua)
	m.batch = nodekit.NewScript(b.String())
	return m
}

// fnOf returns the number of c's script in the batch script, or "" when
// c's script is not one of the merger's.
func (m *merger) fnOf(c *dlm.Call) string {
	if c.Source != "" {
		return m.fn[c.Source]
	}
	return m.fn[c.SHA1]
}

// A part is one call as sent: a caller's call (index), or a batch script
// call carrying several (members, their indexes in the caller's calls).
type part struct {
	call    dlm.Call
	index   int
	members []int
}

// runMerged runs calls on the node, merging what it can, and sets every
// call's Reply or Err.
func (n *Node) runMerged(ctx context.Context, calls []dlm.Call) {
	routing := nodekit.Routing(n.routing.Load())
	if n.merge == nil || len(calls) < 2 || routing == nodekit.RoutingUnknown {
		n.Node.Run(ctx, calls)
		return
	}
	parts := n.plan(calls, routing)
	if len(parts) == len(calls) {
		n.Node.Run(ctx, calls) // nothing merged
		return
	}
	sent := make([]dlm.Call, len(parts))
	for i := range parts {
		sent[i] = parts[i].call
	}
	n.Node.Run(ctx, sent)
	var again []int // calls to send again by themselves
	var noScript []int
	for i, p := range parts {
		c := sent[i]
		switch {
		case p.members == nil:
			calls[p.index].Reply, calls[p.index].Err = c.Reply, c.Err
		case c.Err != nil && errors.Is(c.Err, dlm.ErrNoScript):
			noScript = append(noScript, i)
		case c.Err != nil && strings.Contains(c.Err.Error(), "CROSSSLOT"):
			// A cluster node behind a one-server client: nothing ran.
			// Merge within slots from now on; send these one by one.
			n.routing.Store(int32(nodekit.RoutingBySlot))
			again = append(again, p.members...)
		case c.Err != nil:
			for _, j := range p.members {
				calls[j].Reply, calls[j].Err = nil, c.Err
			}
		default:
			again = append(again, n.split(c.Reply, p.members, calls)...)
		}
	}
	if len(noScript) > 0 {
		// The server lost the batch script (a restart, SCRIPT FLUSH): once
		// more by EVAL.
		retry := make([]dlm.Call, len(noScript))
		for j, i := range noScript {
			retry[j] = sent[i]
			retry[j].SHA1, retry[j].Source, retry[j].Reply, retry[j].Err = "", n.merge.batch.Source(), nil, nil
		}
		n.Node.Run(ctx, retry)
		for j, i := range noScript {
			c, members := retry[j], parts[i].members
			if c.Err != nil {
				for _, k := range members {
					calls[k].Reply, calls[k].Err = nil, c.Err
				}
				continue
			}
			again = append(again, n.split(c.Reply, members, calls)...)
		}
	}
	if len(again) > 0 {
		one := make([]dlm.Call, len(again))
		for j, i := range again {
			one[j] = dlm.Call{SHA1: calls[i].SHA1, Source: calls[i].Source, Keys: calls[i].Keys, Args: calls[i].Args}
		}
		n.Node.Run(ctx, one)
		for j, i := range again {
			calls[i].Reply, calls[i].Err = one[j].Reply, one[j].Err
		}
	}
}

// plan groups calls into parts: calls of the merger's scripts that may share
// a script call (all of them, or on a Cluster those of one hash slot), at
// most maxMerge to a part; every other call stays a part of its own.
func (n *Node) plan(calls []dlm.Call, routing nodekit.Routing) []part {
	var parts []part
	open := map[int]int{} // group (a slot, or 0) → index of its open merged part
	for i := range calls {
		c := &calls[i]
		fn := n.merge.fnOf(c)
		if fn == "" || len(c.Keys) == 0 {
			parts = append(parts, alone(calls, i))
			continue
		}
		g := 0
		if routing == nodekit.RoutingBySlot {
			g = nodekit.Slot(c.Keys[0])
		}
		pi, ok := open[g]
		if !ok || len(parts[pi].members) == maxMerge {
			parts = append(parts, part{call: dlm.Call{SHA1: n.merge.batch.SHA1(), Args: []string{"0"}}, members: []int{}})
			pi = len(parts) - 1
			open[g] = pi
		}
		p := &parts[pi]
		p.members = append(p.members, i)
		p.call.Keys = append(p.call.Keys, c.Keys...)
		p.call.Args = append(p.call.Args, fn, strconv.Itoa(len(c.Keys)), strconv.Itoa(len(c.Args)))
		p.call.Args = append(p.call.Args, c.Args...)
	}
	// A merged part of one call goes as that call; the others count theirs.
	for i := range parts {
		p := &parts[i]
		switch {
		case p.members == nil:
		case len(p.members) == 1:
			*p = alone(calls, p.members[0])
		default:
			p.call.Args[0] = strconv.Itoa(len(p.members))
		}
	}
	return parts
}

// split hands out a batch script's reply to its members' calls, and returns
// the members that raised an error inside it (to be sent again alone).
func (n *Node) split(r []int64, members []int, calls []dlm.Call) (failed []int) {
	at := 0
	for _, j := range members {
		if at >= len(r) {
			calls[j].Reply, calls[j].Err = nil, fmt.Errorf("dlm: batch script reply %v is short", r)
			continue
		}
		l := int(r[at])
		at++
		if l < 0 || at+l > len(r) {
			failed = append(failed, j)
			continue
		}
		calls[j].Reply, calls[j].Err = r[at:at+l:at+l], nil
		at += l
	}
	n.merged.Add(int64(len(members) - len(failed)))
	return failed
}

// alone is calls[i] as a part of its own.
func alone(calls []dlm.Call, i int) part {
	c := &calls[i]
	return part{call: dlm.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args}, index: i}
}
