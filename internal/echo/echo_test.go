package echo_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm/internal/echo"
)

func TestQuote(t *testing.T) {
	assert.Equal(t, `"short\n"`, echo.Quote("short\n"))
	assert.Equal(t, `"`+strings.Repeat("x", echo.Max)+`"`, echo.Quote(strings.Repeat("x", echo.Max)))
	assert.Equal(t, `"`+strings.Repeat("x", echo.Max)+`"…(100000 bytes)`, echo.Quote(strings.Repeat("x", 100_000)))
	// The cut falls on a character's start: "x" and 31 two-byte characters
	// fill 63 bytes, and the 64th begins a character that does not fit.
	assert.Equal(t, `"x`+strings.Repeat("é", 31)+`"…(201 bytes)`, echo.Quote("x"+strings.Repeat("é", 100)))
}

func TestBare(t *testing.T) {
	assert.Equal(t, "h:1", echo.Bare("h:1"))
	assert.Equal(t, `"h\n:1"`, echo.Bare("h\n:1"))
	assert.Equal(t, `"`+strings.Repeat("x", echo.Max)+`"…(65 bytes)`, echo.Bare(strings.Repeat("x", echo.Max+1)))
}
