package nodekit_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Reply reads a reply as its code and message, whatever the client's
// wording, and a pre-7.0 server's wrapping of a command's error reply in
// a script's (TestServerMatrix/redis-6.0 meets it) as the command's.
func TestReply(t *testing.T) {
	const wrapped = "Error running script (call to f_5a9217c8c9777730f8cae374f4c67dfc7802262c): @user_script:2: "
	for _, tc := range []struct{ text, code, msg string }{
		{"WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE", "Operation against a key holding the wrong kind of value"},
		{"ERR unknown command 'EVAL'", "ERR", "unknown command 'EVAL'"},
		{"unknown command 'EVAL'", "ERR", "unknown command 'EVAL'"}, // rueidis strips "ERR "
		{"AUTH <password> called without any password configured", "ERR", "AUTH <password> called without any password configured"},
		{"ERR " + wrapped + "WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE", "Operation against a key holding the wrong kind of value"},
		{wrapped + "WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE", "Operation against a key holding the wrong kind of value"},
		{"ERR " + wrapped + "NOPERM this user has no permissions to run the 'get' command", "NOPERM", "this user has no permissions to run the 'get' command"},
		{"ERR " + wrapped + "ERR syntax error", "ERR", "syntax error"},
		// A Lua error is not a command's reply: left as it is.
		{"ERR " + wrapped + "user_script:2: attempt to compare nil with number", "ERR", wrapped + "user_script:2: attempt to compare nil with number"},
		{"ERR Error running script (call to f_x): @user_script:x: WRONGTYPE y", "ERR", "Error running script (call to f_x): @user_script:x: WRONGTYPE y"},
	} {
		r := nodekit.Reply(tc.text, nil)
		assert.Equal(t, tc.code, r.Code, "%q", tc.text)
		assert.Equal(t, tc.msg, r.Message, "%q", tc.text)
	}
	assert.True(t, dlm.Permanent(nodekit.Reply("ERR "+wrapped+"WRONGTYPE Operation against a key holding the wrong kind of value", nil)))
}
