// The batch form of a merged script: the Lua that runs each call of a
// batch in turn.

package eval

import "strings"

// BodyMark is a line that may part a merged script's source: the prelude
// before it (local functions, defined once per batch), the body after it
// (run once per call).
const BodyMark = "-- body\n"

// batchOf returns the batch form of a script that replies with an integer
// or an array of integers: ARGV[1] and ARGV[2] are each call's key and
// argument counts, written as strings of that length (countText), KEYS and
// the rest of ARGV the calls' keys and arguments in turn. The reply holds, for each call,
// the length of its reply and its reply (an integer n as 1, n), or −1 when
// it raised an error.
//
// A server runs each Lua instruction at the cost of tens of its own, and
// grows a table at the cost of hundreds: the loop reads the counts without
// tonumber (a strtod), sizes its tables when it makes them, and counts the
// reply's length rather than asking for it.
func batchOf(src string) string {
	prelude, body, ok := strings.Cut(src, BodyMark)
	if !ok {
		prelude, body = "", src
	}
	return prelude + "local function one(KEYS, ARGV)\n" + body + `
end
local KEYS, ARGV = KEYS, ARGV
local nk, na, out, n, a = #ARGV[1], #ARGV[2], {}, 0, 2
local keys, args = {nil, nil, nil, nil}, {nil, nil, nil, nil}
for k = 0, #KEYS - nk, nk do
  for i = 1, nk do keys[i] = KEYS[k + i] end
  for i = 1, na do args[i] = ARGV[a + i] end
  a = a + na
  local ok, r = pcall(one, keys, args)
  local ty = ok and type(r)
  if ty == 'number' then
    out[n + 1] = 1
    out[n + 2] = r
    n = n + 2
  elseif ty == 'table' then
    local m = #r
    out[n + 1] = m
    for i = 1, m do out[n + 1 + i] = r[i] end
    n = n + 1 + m
  else
    n = n + 1
    out[n] = -1
  end
end
return out
`
}

// countText returns n as batchOf reads a count: a string of n bytes.
func countText(n int) string {
	const xs = "xxxxxxxxxxxxxxxx"
	if n <= len(xs) {
		return xs[:n]
	}
	return strings.Repeat("x", n)
}
