-- Prelude of the scripts that read a lock, whose value is "<fence>:<token>".
-- holds makes no string of a part of v (held makes one, of the fence): Lua
-- interns every string it makes, which cost a release more than its DEL.
local find = string.find

-- holds reports whether the value v is token's lock.
local function holds(v, token)
  local i = v and find(v, ':', 1, true) -- v is false when the key is missing
  if i and #v - i == #token and find(v, token, i + 1, true) then
    return true
  end
  return false
end

-- held returns the lock's fence when the value v is token's lock, else nil.
local function held(v, token)
  if holds(v, token) then
    return tonumber(string.sub(v, 1, find(v, ':', 1, true) - 1))
  end
  return nil
end
