package rueidis

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/dlmgo/dlm"
)

var _ dlm.ReplicaWaiter = (*Node)(nil)

// EvalSHAWait implements dlm.ReplicaWaiter: EVALSHA and then WAIT (or
// WAITAOF), written together on one connection that no other caller uses
// meanwhile, and both replies read from it.
//
// On standalone and Sentinel clients the pair is one DoMulti whose WAIT is
// marked blocking: rueidis then takes a connection of its own from its pool
// of dedicated connections (never a shared, auto-pipelining one), writes
// both commands on it in order and closes it when the call ends with a
// deadline, cancellation or network error, so an abandoned WAIT never holds
// up later calls. On a Cluster client the pair is sent on a dedicated
// connection to the primary that owns keys' slot (rueidis picks it from the
// script's keys).
//
// A WAIT blocks a connection for up to w.Timeout; calls running at once use
// one connection each.
func (n *Node) EvalSHAWait(ctx context.Context, w dlm.Wait, sha1 string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return n.callWait(ctx, w, true, sha1, keys, args)
}

// EvalWait implements dlm.ReplicaWaiter like EvalSHAWait, with EVAL.
func (n *Node) EvalWait(ctx context.Context, w dlm.Wait, src string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	return n.callWait(ctx, w, false, src, keys, args)
}

type waitResult struct {
	r    []int64
	acks dlm.Acks
	err  error
}

func (n *Node) callWait(ctx context.Context, w dlm.Wait, bySHA bool, script string, keys, args []string) ([]int64, dlm.Acks, error) {
	wcmd, err := w.Command()
	if err != nil {
		return nil, dlm.Acks{}, err
	}
	ev, err := build(func() rueidis.Completed {
		if bySHA {
			return n.c.B().Evalsha().Sha1(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}
		return n.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	})
	if err != nil {
		return nil, dlm.Acks{}, err
	}
	// Marked blocking, explicitly: rueidis never sends a blocking command on
	// a connection it multiplexes between callers.
	wait := n.c.B().Arbitrary(wcmd...).Blocking()
	var res waitResult
	if n.watches(ctx) {
		res = watchCancel(ctx, func() waitResult { return n.doWait(ctx, w, wcmd[0], ev, wait) },
			func(err error) waitResult { return waitResult{err: err} })
	} else {
		res = n.doWait(ctx, w, wcmd[0], ev, wait)
	}
	return res.r, res.acks, res.err
}

func (n *Node) doWait(ctx context.Context, w dlm.Wait, name string, ev, wait rueidis.Completed) waitResult {
	var resps []rueidis.RedisResult
	if n.c.Mode() == rueidis.ClientModeCluster {
		// The dedicated client connects, with ctx, to the owner of the first
		// command's slot, and never follows a redirection.
		dc, release := n.c.Dedicate()
		resps = dc.DoMulti(ctx, ev, wait)
		if broken(resps) {
			dc.Close() // drop the connection with its WAIT possibly pending
		} else {
			release()
		}
	} else {
		resps = n.c.DoMulti(ctx, ev, wait)
	}
	r, err := ints(resps[0])
	if err != nil {
		return waitResult{err: err}
	}
	acks, err := parseAcks(w, resps[1])
	if err != nil {
		return waitResult{r: r, err: fmt.Errorf("dlm: %s after the script: %w", name, err)}
	}
	return waitResult{r: r, acks: acks}
}

// broken reports whether any reply is an error of the connection or of the
// context rather than of the server.
func broken(resps []rueidis.RedisResult) bool {
	for _, r := range resps {
		if r.NonRedisError() != nil {
			return true
		}
	}
	return false
}

// parseAcks reads WAIT's integer or WAITAOF's pair of integers.
func parseAcks(w dlm.Wait, res rueidis.RedisResult) (dlm.Acks, error) {
	msg, err := res.ToMessage()
	if err != nil {
		return dlm.Acks{}, err
	}
	if msg.IsInt64() {
		x, _ := msg.ToInt64()
		return w.ParseAcks([]int64{x})
	}
	arr, err := msg.ToArray()
	if err != nil {
		return dlm.Acks{}, fmt.Errorf("reply is not integers: %w", err)
	}
	reply := make([]int64, len(arr))
	for i := range arr {
		if reply[i], err = arr[i].ToInt64(); err != nil {
			return dlm.Acks{}, fmt.Errorf("reply element %d: %w", i, err)
		}
	}
	return w.ParseAcks(reply)
}
