package inspect_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/inspect"
)

func TestInspectNeedsAnInspector(t *testing.T) {
	var s driver.Strategy = struct{ driver.Strategy }{}
	_, err := inspect.Key(context.Background(), s, "k")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = inspect.Revoke(context.Background(), s, "k", "me", "why")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestSummarize(t *testing.T) {
	a, b := "a-token", "b-token"
	info := inspect.Summarize("k", []inspect.NodeState{
		{Node: "n1", Token: a, Fence: 7, TTL: 900 * time.Millisecond, Waiters: 1},
		{Node: "n2", Token: a, Fence: 7, TTL: 800 * time.Millisecond, Waiters: 2},
		{Node: "n3", Token: b, Fence: 9, TTL: time.Second},
		{Node: "n4", Err: errors.New("down")},
		{Node: "n5"},
	})
	assert.False(t, info.Held, "2 of 5 is no majority")
	assert.Equal(t, 2, info.Waiters)
	info = inspect.Summarize("k", []inspect.NodeState{
		{Node: "n1", Token: a, Fence: 7, TTL: 900 * time.Millisecond},
		{Node: "n2", Token: a, Fence: 7, TTL: 800 * time.Millisecond},
		{Node: "n3", Token: b, Fence: 9, TTL: time.Second},
	})
	assert.True(t, info.Held)
	assert.Equal(t, a, info.Token)
	assert.Equal(t, uint64(7), info.Fence)
	assert.Equal(t, 800*time.Millisecond, info.Remaining, "the least TTL of the majority")
	assert.False(t, info.HolderOK, "a token not made by a Manager")
}
