package dlm_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// newVManager returns a Manager over a Single strategy on a new client of srv.
func newVManager(t testing.TB, srv *dlmtest.Server, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	return newM(t, newSingle(t, srv.Node()), opts...)
}

// do runs a command on srv, failing the test on an error.
func do(t testing.TB, srv *dlmtest.Server, args ...string) any {
	t.Helper()
	v, err := srv.Do(args...)
	require.NoError(t, err, "%v", args)
	return v
}

// pttl is the remaining TTL of key on srv (PTTL).
func pttl(t testing.TB, srv *dlmtest.Server, key string) time.Duration {
	t.Helper()
	return time.Duration(do(t, srv, "PTTL", key).(int64)) * time.Millisecond
}

// lockKey is the server key of a dlm key's lock.
func lockKey(key string) string {
	k, _ := strategy.Keys(key)
	return k
}
