package dlm_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/inspect"
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
	h, ok := inspect.HolderOf(l.Token())
	require.True(t, ok)
	assert.Equal(t, "billing-worker 7 (dot.ted)", h.Owner, "dots in the owner survive")
	assert.Equal(t, 3*time.Second, h.TTL)
	assert.False(t, h.Since.Before(before) || h.Since.After(time.Now()), "since %v", h.Since)
	assert.Equal(t, l.Token(), s.token, "the strategy got the token the Lock reports")

	other, err := m.TryLock(context.Background(), "k2")
	require.NoError(t, err)
	assert.NotEqual(t, l.Token()[:40], other.Token()[:40], "random parts differ")

	for _, bad := range []string{"", "abc", strings.Repeat("a", 40) + ".x.1.o", strings.Repeat("a", 40) + ".1.-1.o", strings.Repeat("a", 40) + ".1.1.", strings.Repeat("a", 40)} {
		_, ok := inspect.HolderOf(bad)
		assert.False(t, ok, "%q", bad)
	}
}

func TestDefaultOwnerNamesTheProcess(t *testing.T) {
	m, err := dlm.New(&fixedStrategy{})
	require.NoError(t, err)
	l, err := m.TryLock(context.Background(), "k")
	require.NoError(t, err)
	h, ok := inspect.HolderOf(l.Token())
	require.True(t, ok)
	assert.Regexp(t, `^dlm\.test@.+:\d+$`, h.Owner)
}

// fixedStrategy grants every Acquire a one-minute lease with fence 1 and
// remembers the last token; it is not a inspect.Inspector.
type fixedStrategy struct {
	driver.Strategy // nil: only Acquire is called
	token           string
}

func (s *fixedStrategy) Acquire(_ context.Context, _, token string, _ time.Duration) (driver.Lease, error) {
	s.token = token
	return driver.Lease{Fence: 1, Until: time.Now().Add(time.Minute)}, nil
}

func TestFitOwner(t *testing.T) {
	assert.Equal(t, "a?b", dlm.FitOwner("a\nb"))
	assert.Equal(t, "unknown", dlm.FitOwner(""))
	long := dlm.FitOwner(strings.Repeat("é", dlm.MaxOwnerLen))
	assert.LessOrEqual(t, len(long), dlm.MaxOwnerLen)
	assert.True(t, utf8.ValidString(long))
	_, err := dlm.New(&fixedStrategy{}, dlm.WithOwner(dlm.FitOwner("x\x00\xffy")))
	assert.NoError(t, err, "fit for WithOwner")
}
