package nodekit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Helpers for a driver that speaks RESP itself, over a net.Conn of its own:
// AppendCommand writes a command, ReadReply reads a reply into the values
// Ints and ParseAcks take.

// AppendCommand appends args, as one RESP command (an array of bulk
// strings), to buf: EVAL, EVALSHA, WAIT and WAITAOF are sent so.
func AppendCommand(buf []byte, args ...string) []byte {
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// An ErrorReply is an error the server replied with (RESP's simple and
// blob errors): the call failed, the connection is still in step. Pass it
// to Reply, whose *driver.ReplyError wraps NOSCRIPT with driver.ErrNoScript.
type ErrorReply string

func (e ErrorReply) Error() string { return string(e) }

// ReadReply reads one reply of RESP2 or RESP3 from r and returns it as
// int64 (integers), []any (arrays, sets, pushes; maps as key, value, …),
// string (simple, bulk and verbatim strings, doubles, big numbers), bool,
// nil (null) or ErrorReply. Any error it returns (I/O, a deadline, a
// malformed reply) leaves the connection out of step: close it.
//
// A script's reply goes to Ints (after an ErrorReply check), a wait's to
// ParseAcks.
func ReadReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("dlm: malformed RESP line %q", line)
	}
	kind, text := line[0], line[1:len(line)-2]
	switch kind {
	case '+', ',', '(':
		return text, nil
	case '-':
		return ErrorReply(text), nil
	case ':':
		return strconv.ParseInt(text, 10, 64)
	case '_':
		return nil, nil
	case '#':
		return text == "t", nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < -1 {
		return nil, fmt.Errorf("dlm: malformed RESP line %q", line)
	}
	switch kind {
	case '$', '!', '=':
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, errors.New("dlm: malformed RESP bulk string")
		}
		s := string(buf[:n])
		switch kind {
		case '!':
			return ErrorReply(s), nil
		case '=': // verbatim: "txt:" and the text
			if len(s) >= 4 && s[3] == ':' {
				s = s[4:]
			}
		}
		return s, nil
	case '*', '~', '>', '%', '|':
		if n < 0 {
			return nil, nil
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = ReadReply(r); err != nil {
				return nil, err
			}
		}
		if kind == '|' { // attributes come before the reply they describe
			return ReadReply(r)
		}
		return arr, nil
	}
	return nil, fmt.Errorf("dlm: unknown RESP type in %q", strings.TrimSpace(line))
}
