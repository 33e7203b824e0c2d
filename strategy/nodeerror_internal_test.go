package strategy

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver"
)

// A TRYAGAIN reply asks for a quick retry, whatever the driver: the
// Manager reads it through dlm.RetryAfter.
func TestRetryAfterTryAgain(t *testing.T) {
	e := &nodeError{Node: "n", Op: "acquire", Err: &driver.ReplyError{Code: "TRYAGAIN", Message: "TRYAGAIN Multiple keys request during rehashing of slot"}}
	d, ok := dlm.RetryAfter(e)
	assert.True(t, ok)
	assert.Equal(t, slotMovingRetry, d)
	_, ok = dlm.RetryAfter(&nodeError{Node: "n", Op: "acquire", Err: &driver.ReplyError{Code: "BUSY", Message: "BUSY"}})
	assert.False(t, ok)
}
