package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/config"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

func TestDisplayKey(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]string{
		"orders:42":         "orders:42",
		`back\slash`:        `back\slash`,
		"café":              "café",
		"a\nb":              `"a\nb"`,
		"two words":         `"two words"`,
		`say "hi"`:          `"say \"hi\""`,
		`"quoted"`:          `"\"quoted\""`,
		"caf\xe9":           `"caf\xe9"`,
		"tab\there":         `"tab\there"`,
		"zero\u200bwidth":   `"zero\u200bwidth"`,
		"bidi\u202eflip":    `"bidi\u202eflip"`,
		"replacement\ufffd": `"replacement�"`,
		"":                  `""`,
	} {
		assert.Equal(t, want, displayKey(k), "%q", k)
	}
	assert.Equal(t, "dlm run sh@host:12", displayText("dlm run sh@host:12"))
	assert.Equal(t, `"evil\nKEY  OWNER"`, displayText("evil\nKEY  OWNER"))
}

func TestBoundLines(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := boundLines(&b)
	_, _ = w.Write([]byte("short line\nlong: "))
	_, _ = w.Write([]byte(strings.Repeat("y", 100_000)))
	_, _ = w.Write([]byte("\nafter\n"))
	lines := strings.Split(b.String(), "\n")
	require.Len(t, lines, 4, b.String())
	assert.Equal(t, "short line", lines[0])
	assert.Equal(t, "long: "+strings.Repeat("y", maxLine-len("long: "))+"…(100006 bytes)", lines[1])
	assert.Equal(t, "after", lines[2])
}

// Keys with a newline or bytes that are not UTF-8: dlm ls prints them
// quoted (no forged row), --json keeps their bytes in key_b64, and inspect
// and revoke take them back by --key-quoted and --key-b64.
func TestOperatorOddKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "single://" + redistest.Start(t).Addr
	m, closer, err := config.Open(ctx, url+"?ttl=1m", goredis.Dial)
	require.NoError(t, err)
	defer closer.Close()
	forged := "job\nforged-row  nobody  1h  99  1h  0"
	latin1 := "caf\xe9"
	for _, k := range []string{"plain", forged, latin1} {
		_, err := m.TryLock(ctx, k)
		require.NoError(t, err, "%q", k)
	}

	code, out := runDLM(t, "ls", "--url", url)
	require.Equal(t, 0, code, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Len(t, lines, 4, "a header and three locks, no forged row: %s", out)
	assert.Contains(t, out, "\n"+`"job\nforged-row  nobody  1h  99  1h  0"`+"  ")
	assert.Contains(t, out, "\n"+`"caf\xe9"`+"  ")
	assert.Contains(t, out, "\nplain  ")
	for _, l := range lines {
		assert.False(t, strings.HasPrefix(l, "forged-row"), out)
	}

	code, out = runDLM(t, "ls", "--json", "--url", url)
	require.Equal(t, 0, code, out)
	var list []infoJSON
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	got := map[string]string{}
	for _, in := range list {
		k, err := base64.StdEncoding.DecodeString(in.KeyB64)
		require.NoError(t, err)
		got[string(k)] = in.Key
	}
	assert.Equal(t, map[string]string{"plain": "plain", forged: forged, latin1: "caf\ufffd"}, got)

	b64 := base64.StdEncoding.EncodeToString([]byte(latin1))
	code, out = runDLM(t, "inspect", "--url", url, "--key-b64", b64)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "key:       \"caf\\xe9\"\nheld:      yes")
	code, out = runDLM(t, "inspect", "--url", url, "--key-quoted", `"job\nforged-row  nobody  1h  99  1h  0"`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "held:      yes")
	code, out = runDLM(t, "inspect", "--url", url, "--key-quoted", `job`)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "want a Go-quoted string")
	code, out = runDLM(t, "inspect", "--url", url, "--key-b64", b64, "plain")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "one KEY, --key-b64 or --key-quoted")

	code, out = runDLM(t, "revoke", "--url", url, "--reason", "test", "--key-b64", b64)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, `revoked "caf\xe9"`)
	code, out = runDLM(t, "revoke", "--url", url, "--reason", "test", "--key-quoted", `"job\nforged-row  nobody  1h  99  1h  0"`)
	assert.Equal(t, 0, code, out)
	code, out = runDLM(t, "ls", "--url", url)
	assert.Equal(t, 0, code, out)
	assert.Equal(t, 2, strings.Count(out, "\n"), "only plain is left: %s", out)
}
