package nodekit_test

import (
	"bufio"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/nodekit"
)

func TestAppendCommand(t *testing.T) {
	got := string(nodekit.AppendCommand(nil, "EVALSHA", "ab", "1", "k\r\n", ""))
	want := "*5\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$3\r\nk\r\n\r\n$0\r\n\r\n"
	if got != want {
		t.Errorf("AppendCommand: %q, want %q", got, want)
	}
}

// Replies read with ReadReply feed Ints, ParseAcks and Reply.
func TestReadReply(t *testing.T) {
	read := func(wire string) (any, error) {
		return nodekit.ReadReply(bufio.NewReader(strings.NewReader(wire)))
	}
	for _, tc := range []struct {
		wire string
		want any
	}{
		{":-42\r\n", int64(-42)},
		{"+OK\r\n", "OK"},
		{"$5\r\na\r\nbc\r\n", "a\r\nbc"},
		{"$-1\r\n", nil},
		{"*-1\r\n", nil},
		{"_\r\n", nil},
		{"#t\r\n", true},
		{",1.5\r\n", "1.5"},
		{"=7\r\ntxt:abc\r\n", "abc"},
		{"*0\r\n", []any{}},
		{"*2\r\n:1\r\n*1\r\n$1\r\nx\r\n", []any{int64(1), []any{"x"}}},
		{"%1\r\n+k\r\n:2\r\n", []any{"k", int64(2)}},
		{"|1\r\n+ttl\r\n:3\r\n:7\r\n", int64(7)},
		{"-ERR bad\r\n", nodekit.ErrorReply("ERR bad")},
		{"!3\r\nERR\r\n", nodekit.ErrorReply("ERR")},
	} {
		got, err := read(tc.wire)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ReadReply(%q) = %#v, %v; want %#v", tc.wire, got, err, tc.want)
		}
	}
	for _, wire := range []string{"", ":1", ":1\n", "?x\r\n", "$3\r\nab", "$2\r\nabcd\r\n", "*2\r\n:1\r\n", ":x\r\n"} {
		if v, err := read(wire); err == nil {
			t.Errorf("ReadReply(%q) = %#v and no error; want an error (the connection is out of step)", wire, v)
		}
	}

	v, _ := read("*3\r\n:1\r\n:-9007199254740992\r\n:0\r\n")
	if r, err := nodekit.Ints(v); err != nil || !reflect.DeepEqual(r, []int64{1, -1 << 53, 0}) {
		t.Errorf("Ints of a read array: %v, %v", r, err)
	}
	v, _ = read("*0\r\n")
	if r, err := nodekit.Ints(v); err != nil || r == nil || len(r) != 0 {
		t.Errorf("Ints of an empty array: %#v, %v; want a non-nil empty reply", r, err)
	}
	v, _ = read(":2\r\n")
	if a, err := nodekit.ParseAcks(driver.Wait{Replicas: 2, Timeout: time.Second}, v); err != nil || a.Replicas != 2 {
		t.Errorf("ParseAcks of WAIT's reply: %+v, %v", a, err)
	}
	v, _ = read("*2\r\n:1\r\n:0\r\n")
	if a, err := nodekit.ParseAcks(driver.Wait{AOF: true, Local: true, Timeout: time.Second}, v); err != nil || !a.Local || a.Replicas != 0 {
		t.Errorf("ParseAcks of WAITAOF's reply: %+v, %v", a, err)
	}
	v, _ = read("-NOSCRIPT No matching script.\r\n")
	if e, ok := v.(nodekit.ErrorReply); !ok || !errors.Is(nodekit.Reply(string(e), e), driver.ErrNoScript) {
		t.Errorf("Reply of a NOSCRIPT reply read: %v does not match driver.ErrNoScript", v)
	}
}
