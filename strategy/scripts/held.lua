-- Prelude of the scripts that read a lock, whose value is "<fence>:<token>",
-- or "0<fence>:<token>" once an acquisition was refused on it (marked: its
-- release publishes, see acquire.lua). holds makes no string of a part of
-- v (held makes one, of the fence): Lua interns every string it makes.
local find, byte = string.find, string.byte

-- holds reports whether the value v is token's lock.
local function holds(v, token)
  local i = v and find(v, ':', 1, true) -- v is false when the key is missing
  if i and #v - i == #token and find(v, token, i + 1, true) then
    return true
  end
  return false
end

-- held returns the lock's fence when the value v is token's lock, else nil
-- (tonumber reads a marked fence's leading 0 as nothing).
local function held(v, token)
  if holds(v, token) then
    return tonumber(string.sub(v, 1, find(v, ':', 1, true) - 1))
  end
  return nil
end

-- marked reports whether the value v of a lock is marked.
local function marked(v)
  return byte(v, 1) == 48 -- '0': a fence has no leading zero of its own
end
