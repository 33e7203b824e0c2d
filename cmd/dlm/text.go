package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dlmgo/dlm/internal/echo"
)

// How dlm prints strings that come from outside: lock keys, owners and
// revocation notes that anyone who can take a lock chose (ls, inspect,
// revoke), and whatever a user typed, echoed back in an error.

// displayKey is how the text output of ls, inspect and revoke writes a lock
// key: as it is when it is valid UTF-8 and every character is printable
// (strconv.IsPrint) and none is a space or a double quote; else Go-quoted
// (strconv.Quote: "a\nb", "caf\xe9", "two words"). A key printed bare is
// the key exactly, and one printed quoted begins with '"', which a bare one
// never does; --key-quoted takes the quoted form back (--key-b64 the
// key_b64 of --json).
func displayKey(k string) string {
	if k == "" || strings.ContainsAny(k, " \"") || !printable(k) {
		return strconv.Quote(k)
	}
	return k
}

// displayText is how the text output writes an owner, a revoker and a
// reason: as it is unless it holds a character that is not printable
// (strconv.IsPrint: control characters such as a newline, which would
// forge a line, invalid UTF-8, format characters), then Go-quoted.
func displayText(s string) string {
	if !printable(s) {
		return strconv.Quote(s)
	}
	return s
}

// printable reports whether s is valid UTF-8 of printable characters and
// spaces (U+0020) only.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return false // an invalid byte decodes as RuneError; a real U+FFFD is quoted too
		}
	}
	return true
}

// keyArg returns the KEY an operator command names: the one argument as it
// is, or the --key-b64 (standard base64, as key_b64 in --json) or
// --key-quoted (Go-quoted, as ls and inspect print a key that is not
// printable) flag instead.
func keyArg(args []string, b64, quoted string) (string, error) {
	given := 0
	for _, v := range []string{b64, quoted} {
		if v != "" {
			given++
		}
	}
	switch {
	case given+len(args) != 1:
		return "", fmt.Errorf("one KEY, --key-b64 or --key-quoted, please")
	case b64 != "":
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return "", fmt.Errorf("--key-b64 %s: not standard base64: %v", quoteInput(b64), err)
		}
		return string(k), nil
	case quoted != "":
		k, err := strconv.Unquote(quoted)
		if err != nil || !strings.HasPrefix(quoted, `"`) {
			return "", fmt.Errorf("--key-quoted %s: want a Go-quoted string, as dlm ls prints it (\"a\\nb\")", quoteInput(quoted))
		}
		return k, nil
	}
	return args[0], nil
}

// quoteInput quotes s, something a user gave, for an error message, at
// most echo.Max bytes of it (echo.Quote).
func quoteInput(s string) string { return echo.Quote(s) }

// maxLine bounds the lines a FlagSet writes (its errors quote the value or
// the flag name a user gave, whole).
const maxLine = 512

// boundLines returns a writer that passes on to w the first maxLine bytes
// of each line and, in place of the rest of a longer one, "…(N bytes)".
func boundLines(w io.Writer) io.Writer { return &lineBounder{w: w} }

type lineBounder struct {
	w    io.Writer
	n    int  // bytes of the current line so far
	kept bool // the last byte was passed on (so its character's next bytes are too)
}

func (b *lineBounder) Write(p []byte) (int, error) {
	var out []byte
	for _, c := range p {
		if c == '\n' {
			if b.n > maxLine {
				out = fmt.Appendf(out, "…(%d bytes)", b.n)
			}
			out = append(out, c)
			b.n, b.kept = 0, false
			continue
		}
		b.kept = b.n < maxLine || b.kept && !utf8.RuneStart(c)
		if b.kept {
			out = append(out, c)
		}
		b.n++
	}
	if _, err := b.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
