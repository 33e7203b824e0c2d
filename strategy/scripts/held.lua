-- Prelude of the scripts that read a lock, whose value is "<fence>:<token>":
-- held returns the lock's fence when the value v is token's lock, else nil.
local function held(v, token)
  local i = v and string.find(v, ':', 1, true)
  if i and string.sub(v, i + 1) == token then
    return tonumber(string.sub(v, 1, i - 1))
  end
  return nil
end
