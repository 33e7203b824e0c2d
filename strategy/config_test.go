package strategy_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/strategy"
)

func TestParseURL(t *testing.T) {
	c, err := strategy.ParseURL("single://u:secret@127.0.0.1:6379?ttl=10s&timeout=50ms&drift_factor=0.02")
	require.NoError(t, err)
	f := 0.02
	assert.Equal(t, strategy.Config{
		Strategy: "single", Addrs: []string{"127.0.0.1:6379"}, Username: "u", Password: "secret",
		TTL: strategy.Duration(10 * time.Second), Timeout: strategy.Duration(50 * time.Millisecond), DriftFactor: &f,
	}, c)
	assert.Len(t, c.Options(), 2)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for url, field := range map[string]string{
		"single://h:1?tll=10s":             `"tll"`,
		"single://h:1?ttl=ten":             "ten",
		"single://h:1?ttl=-1s":             "ttl",
		"single://h:1?timeout=-1s":         "timeout",
		"single://h:1?drift_factor=0.9":    "drift_factor",
		"single://h:1?drift_factor=x":      "drift_factor",
		"single://h:1?addrs=x":             `"addrs"`,
		"single://h:1?ttl=1s&ttl=2s":       `"ttl" given 2 times`,
		"single://h:1,h:2":                 "addrs",
		"nosuch://h:1":                     `unknown strategy "nosuch"`,
		"h:1":                              "strategy",
		"single://h:1,,h:2":                "addrs",
		"single://h:1?ttl=10s&unknown=yes": `"unknown"`,
	} {
		_, err := strategy.ParseURL(url)
		require.Error(t, err, url)
		assert.ErrorIs(t, err, dlm.ErrInvalid, url)
		assert.Contains(t, err.Error(), field, url)
	}
}

func TestParseConfigJSON(t *testing.T) {
	c, err := strategy.ParseConfig(strings.NewReader(`{"strategy":"single","addrs":["127.0.0.1:6379"],"ttl":"2s"}`))
	require.NoError(t, err)
	assert.Equal(t, strategy.Duration(2*time.Second), c.TTL)

	// The JSON form round-trips.
	b, err := json.Marshal(c)
	require.NoError(t, err)
	c2, err := strategy.ParseConfig(strings.NewReader(string(b)))
	require.NoError(t, err)
	assert.Equal(t, c, c2)

	for doc, field := range map[string]string{
		`{"strategy":"single","ttl":"2s","colour":"red"}`: `unknown field "colour"`,
		`{"strategy":"single","ttl":2}`:                   "duration string",
		`{"strategy":"redblack"}`:                         "strategy",
		`{}`:                                              "strategy: missing",
	} {
		_, err := strategy.ParseConfig(strings.NewReader(doc))
		require.Error(t, err, doc)
		assert.ErrorIs(t, err, dlm.ErrInvalid, doc)
		assert.Contains(t, err.Error(), field, doc)
	}
}

func TestConfigNew(t *testing.T) {
	c, err := strategy.ParseURL("single://127.0.0.1:1")
	require.NoError(t, err)
	_, err = c.New()
	assert.ErrorIs(t, err, dlm.ErrInvalid, "no node")
	_, err = c.New(nil)
	assert.ErrorIs(t, err, dlm.ErrInvalid, "nil node")
}
