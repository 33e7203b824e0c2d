package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm"
)

func TestFitOwner(t *testing.T) {
	assert.Equal(t, "a?b", fitOwner("a\nb"))
	assert.Equal(t, "unknown", fitOwner(""))
	long := fitOwner(strings.Repeat("é", dlm.MaxOwnerLen))
	assert.LessOrEqual(t, len(long), dlm.MaxOwnerLen)
	assert.True(t, utf8.ValidString(long))
	_, err := dlm.New(struct{ dlm.Strategy }{}, dlm.WithOwner(fitOwner("x\x00\xffy")))
	assert.NoError(t, err, "fit for WithOwner")
}
