package nodekit_test

import (
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/nodekit"
)

func TestWaitCommand(t *testing.T) {
	for _, tc := range []struct {
		w    driver.Wait
		want []string
	}{
		{driver.Wait{Replicas: 2, Timeout: 100 * time.Millisecond}, []string{"WAIT", "2", "100"}},
		{driver.Wait{Replicas: 1, Timeout: 1500 * time.Microsecond}, []string{"WAIT", "1", "2"}}, // rounded up
		{driver.Wait{Replicas: 0, Timeout: time.Millisecond, AOF: true}, []string{"WAITAOF", "0", "0", "1"}},
		{driver.Wait{Replicas: 2, Timeout: time.Second, AOF: true, Local: true}, []string{"WAITAOF", "1", "2", "1000"}},
	} {
		got, err := nodekit.WaitCommand(tc.w)
		require.NoError(t, err, "%+v", tc.w)
		assert.Equal(t, tc.want, got)
	}
	for _, bad := range []driver.Wait{
		{Replicas: 1},                            // WAIT 0 would block forever
		{Replicas: 1, Timeout: time.Microsecond}, // likewise after truncation
		{Replicas: -1, Timeout: time.Second},
		{Replicas: 1, Timeout: time.Second, Local: true}, // Local without AOF
	} {
		_, err := nodekit.WaitCommand(bad)
		assert.ErrorIs(t, err, driver.ErrInvalid, "%+v", bad)
	}
}

func TestWaitParseAcks(t *testing.T) {
	a, err := nodekit.ParseAcks(driver.Wait{}, int64(2))
	require.NoError(t, err)
	assert.Equal(t, driver.Acks{Replicas: 2}, a)
	a, err = nodekit.ParseAcks(driver.Wait{AOF: true}, []any{int64(1), int64(1)})
	require.NoError(t, err)
	assert.Equal(t, driver.Acks{Replicas: 1, Local: true}, a)
	_, err = nodekit.ParseAcks(driver.Wait{}, []any{int64(1), int64(1)})
	assert.Error(t, err)
	_, err = nodekit.ParseAcks(driver.Wait{AOF: true}, []any{int64(1)})
	assert.Error(t, err)
	_, err = nodekit.ParseAcks(driver.Wait{}, "2")
	assert.Error(t, err)
}
