package goredis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
)

// TestNewCmdArgs: the arguments of a script command are the call's, as
// plain strings (what go-redis writes, routes by and hooks print), for
// calls of every size in one buffer, one beyond the room grow made
// included; and they stay the call's when the call's slices are reused
// afterwards.
func TestNewCmdArgs(t *testing.T) {
	b := new(argBuf)
	b.grow([]driver.Call{{Keys: []string{"k"}}})
	var cmds []*redis.Cmd
	var wants [][]any
	for _, n := range []int{1, 7, 12, 300} {
		keys, args := make([]string, 0, n), []string{"token", "30000"}
		for i := range n {
			keys = append(keys, fmt.Sprintf("key%d", i))
		}
		for _, c := range []driver.Call{{SHA1: "0123abcd", Keys: keys, Args: args}, {Source: "return {1}", Keys: keys, Args: args}} {
			cmd := b.newCmd(context.Background(), &c)
			want := []any{"evalsha", c.SHA1, len(keys)}
			if c.Source != "" {
				want = []any{"eval", c.Source, len(keys)}
			}
			for _, s := range slices.Concat(keys, args) {
				want = append(want, s)
			}
			keys2, args2 := slices.Clone(keys), slices.Clone(args)
			for i := range keys { // a caller that reuses its slices
				keys[i] = strings.ToUpper(keys[i])
			}
			args[0] = "other"
			cmds, wants = append(cmds, cmd), append(wants, want)
			if got := fmt.Sprint(cmd.Args()[3]); got != "key0" {
				t.Fatalf("first key prints as %q", got)
			}
			copy(keys, keys2)
			copy(args, args2)
		}
	}
	for i, cmd := range cmds {
		if got := cmd.Args(); !slices.Equal(got, wants[i]) {
			t.Fatalf("command %d: args %q, want %q", i, got, wants[i])
		}
	}
}
