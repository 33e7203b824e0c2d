package dlm_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
)

func TestWithOwnerRejectsBadOwners(t *testing.T) {
	s := &fixedStrategy{}
	for _, owner := range []string{"", strings.Repeat("x", dlm.MaxOwnerLen+1), "a\nb", "tab\there", "\xff"} {
		_, err := dlm.New(s, dlm.WithOwner(owner))
		assert.ErrorIs(t, err, dlm.ErrInvalid, "%q", owner)
	}
	_, err := dlm.New(s, dlm.WithOwner(strings.Repeat("é", dlm.MaxOwnerLen/2)))
	assert.NoError(t, err, "MaxOwnerLen bytes of UTF-8")
}

func TestTokenCarriesHolder(t *testing.T) {
	s := &fixedStrategy{}
	m, err := dlm.New(s, dlm.WithOwner("billing-worker 7 (dot.ted)"), dlm.WithTTL(3*time.Second))
	require.NoError(t, err)
	before := time.Now().Truncate(time.Millisecond)
	l, err := m.TryLock(context.Background(), "k")
	require.NoError(t, err)
	h, ok := dlm.HolderOf(l.Token())
	require.True(t, ok)
	assert.Equal(t, "billing-worker 7 (dot.ted)", h.Owner, "dots in the owner survive")
	assert.Equal(t, 3*time.Second, h.TTL)
	assert.False(t, h.Since.Before(before) || h.Since.After(time.Now()), "since %v", h.Since)
	assert.Equal(t, l.Token(), s.token, "the strategy got the token the Lock reports")

	other, err := m.TryLock(context.Background(), "k2")
	require.NoError(t, err)
	assert.NotEqual(t, l.Token()[:40], other.Token()[:40], "random parts differ")

	for _, bad := range []string{"", "abc", strings.Repeat("a", 40) + ".x.1.o", strings.Repeat("a", 40) + ".1.-1.o", strings.Repeat("a", 40) + ".1.1.", strings.Repeat("a", 40)} {
		_, ok := dlm.HolderOf(bad)
		assert.False(t, ok, "%q", bad)
	}
}

func TestDefaultOwnerNamesTheProcess(t *testing.T) {
	m, err := dlm.New(&fixedStrategy{})
	require.NoError(t, err)
	l, err := m.TryLock(context.Background(), "k")
	require.NoError(t, err)
	h, ok := dlm.HolderOf(l.Token())
	require.True(t, ok)
	assert.Regexp(t, `^dlm\.test@.+:\d+$`, h.Owner)
}

func TestFitOwner(t *testing.T) {
	assert.Equal(t, "a?b", dlm.FitOwner("a\nb"))
	assert.Equal(t, "unknown", dlm.FitOwner(""))
	long := dlm.FitOwner(strings.Repeat("é", dlm.MaxOwnerLen))
	assert.LessOrEqual(t, len(long), dlm.MaxOwnerLen)
	assert.True(t, utf8.ValidString(long))
	_, err := dlm.New(&fixedStrategy{}, dlm.WithOwner(dlm.FitOwner("x\x00\xffy")))
	assert.NoError(t, err)
}

func TestInspectNeedsAnInspector(t *testing.T) {
	m, err := dlm.New(&fixedStrategy{})
	require.NoError(t, err)
	_, err = m.Inspect(context.Background(), "k")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = m.Revoke(context.Background(), "k", "me", "why")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestSummarize(t *testing.T) {
	a, b := "a-token", "b-token"
	info := dlm.Summarize("k", []dlm.NodeState{
		{Node: "n1", Token: a, Fence: 7, TTL: 900 * time.Millisecond, Waiters: 1},
		{Node: "n2", Token: a, Fence: 7, TTL: 800 * time.Millisecond, Waiters: 2},
		{Node: "n3", Token: b, Fence: 9, TTL: time.Second},
		{Node: "n4", Err: errors.New("down")},
		{Node: "n5"},
	})
	assert.False(t, info.Held, "2 of 5 is no majority")
	assert.Equal(t, 2, info.Waiters)
	info = dlm.Summarize("k", []dlm.NodeState{
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

// fixedStrategy grants every Acquire a one-minute lease with fence 1 and
// remembers the last token; it is not a dlm.Inspector.
type fixedStrategy struct {
	dlm.Strategy // nil: only Acquire is called
	token        string
}

func (s *fixedStrategy) Acquire(_ context.Context, _, token string, _ time.Duration) (dlm.Lease, error) {
	s.token = token
	return dlm.Lease{Fence: 1, Until: time.Now().Add(time.Minute)}, nil
}
