package conformance

import (
	"testing"

	"fmt"
	"slices"

	"github.com/dlmgo/dlm/internal/eval"
)

// Rules on what reaches the server and what comes back.

func testIntegerReplies(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	expect(t, "mixed values", c.eval(t, c.script(
		"return {0, 1, -1, -2, 2147483648, -2147483649, 4294967296, 9007199254740992, -9007199254740992}"), keys),
		[]int64{0, 1, -1, -2, 2147483648, -2147483649, 4294967296, 1 << 53, -1 << 53})
	expect(t, "one value", c.eval(t, c.script("return {-42}"), keys), []int64{-42})
	// A script replying with an integer n gets []int64{n}: dlm's lock
	// scripts grant with the fence alone.
	for _, n := range []int64{0, 1, -42, 4294967296, 1 << 53, -1 << 53} {
		expect(t, fmt.Sprintf("the integer %d", n), c.eval(t, c.script(fmt.Sprintf("return %d", n)), keys), []int64{n})
	}
	expect(t, "an integer from redis.call", c.eval(t, c.script("redis.call('SET', KEYS[1], '10', 'PX', 60000) return redis.call('INCRBY', KEYS[1], -15)"), keys), []int64{-5})
	expect(t, "from redis.call", c.eval(t, c.script(
		"redis.call('SET', KEYS[1], '10', 'PX', 60000) return {redis.call('INCRBY', KEYS[1], -15), redis.call('PTTL', KEYS[1]) > 0 and 1 or 0}"), keys),
		[]int64{-5, 1})
	if r := c.eval(t, c.script("return {}"), keys); len(r) != 0 {
		t.Errorf("empty array: reply %s, want no values", ints(r))
	}
	var want []int64
	for i := range 300 {
		want = append(want, int64(i-150)*1000003)
	}
	expect(t, "300 values", c.eval(t, c.script("local t = {} for i = 1, 300 do t[i] = (i - 151) * 1000003 end return t"), keys), want)
}

func testOtherReplyShapes(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	for _, tc := range []struct{ what, src string }{
		{"bulk string", "return 'x'"},
		{"numeric string", "return '1'"},
		{"nil", "return nil"},
		{"false (nil on the wire; true is the integer 1)", "return false"},
		{"status", "return redis.status_reply('OK')"},
		{"array with a string", "return {1, 'x'}"},
		{"array with a numeric string", "return {1, '2'}"},
		{"array with nil", "return {1, false}"},
		{"nested array", "return {1, {2}}"},
	} {
		r, err := c.evalCtx(t, ctx(t), c.script(tc.src), keys)
		if err == nil {
			t.Errorf("%s reply (%s): got %s and no error, want an error", tc.what, tc.src, ints(r))
		}
	}
}

// bytesScript replies, for every key and then every argument, its length
// followed by its bytes.
const bytesScript = `local out = {}
local function add(s)
  out[#out + 1] = #s
  for i = 1, #s do out[#out + 1] = string.byte(s, i) end
end
for _, k in ipairs(KEYS) do add(k) end
for _, a in ipairs(ARGV) do add(a) end
return out`

func bytesOf(ss ...string) []int64 {
	var out []int64
	for _, s := range ss {
		out = append(out, int64(len(s)))
		for i := range len(s) {
			out = append(out, int64(s[i]))
		}
	}
	return out
}

var binaryStrings = []string{"\x00", "a\x00b", "\r\n", "*1\r\n$4\r\nPING\r\n", "\xff\xfe\x80", "é ü 鍵", " \t", "{}"}

func testBinaryKeys(t *testing.T, c *nodeCase) {
	src := c.script(bytesScript)
	for _, s := range binaryStrings {
		k := c.key(s)
		expect(t, "key "+quote(k), c.eval(t, src, []string{k}), bytesOf(k))
	}
	// A value stored under a binary key is found under the same key.
	k := c.key("\x00\r\n\xff")
	r := c.eval(t, c.script(`redis.call('SET', KEYS[1], 'v', 'PX', 60000)
return {redis.call('EXISTS', KEYS[1]), redis.call('EXISTS', KEYS[2])}`), []string{k, c.key("\x00\r\n")})
	expect(t, "SET then EXISTS under a binary key", r, []int64{1, 0})
}

func testBinaryArgs(t *testing.T, c *nodeCase) {
	src := c.script(bytesScript)
	for _, s := range append(binaryStrings, "", string(make([]byte, 3000))) {
		expect(t, "argument "+quote(s), c.eval(t, src, nil, s), bytesOf(s))
	}
	// A token stored and compared, as lock scripts do.
	token := "tok\x00\r\n\xff"
	r := c.eval(t, c.script(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return {redis.call('GET', KEYS[1]) == ARGV[1] and 1 or 0, redis.call('GET', KEYS[1]) == ARGV[2] and 1 or 0}`),
		[]string{c.key("token")}, token, token[:len(token)-1])
	expect(t, "stored token compared with itself and with a prefix of itself", r, []int64{1, 0})
}

func testArgumentOrder(t *testing.T, c *nodeCase) {
	src := c.script(bytesScript)
	keys := []string{c.key("a"), c.key("bb"), c.key("ccc")}
	for _, args := range [][]string{nil, {}, {"1"}, {"1", "", "3"}, {"", ""}, {"x", "yy", "zzz", "", "5"}} {
		want := bytesOf(append(slices.Clone(keys), args...)...)
		expect(t, fmt.Sprintf("3 keys, args %q", args), c.eval(t, src, keys, args...), want)
	}
	expect(t, "no keys, no args", c.eval(t, src, nil), nil)
	expect(t, "no keys, args", c.eval(t, src, []string{}, "p", "q"), bytesOf("p", "q"))
	// Through EVALSHA too.
	sc := eval.NewScript(src)
	r, err := sc.Run(ctx(t), c, keys, "1", "", "3")
	if err != nil {
		t.Fatalf("Script.Run: %v", err)
	}
	expect(t, "Script.Run, 3 keys, 3 args", r, bytesOf(append(slices.Clone(keys), "1", "", "3")...))
}
