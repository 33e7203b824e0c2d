-- Revokes a lock whoever holds it: deletes it, advances the slot's fencing
-- counter (when it exists: a missing one is the amnesia guard's to create),
-- writes the revocation note that the holder's next renewal finds
-- (extend.lua), kept for a minute after the lock would have expired, and
-- announces the release (announce.lua).
-- KEYS as state.lua's. ARGV[1] who revokes, ARGV[2] why, ARGV[3] as
-- announce's mode.
-- Replies what state() read before the revocation.
local out = state()
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  local token = v
  if i then
    token = string.sub(v, i + 1)
  end
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('INCR', KEYS[2])
  end
  local t = redis.call('TIME')
  local ms = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
  redis.call('SET', KEYS[3], token .. '\n' .. ms .. '\n' .. ARGV[1] .. '\n' .. ARGV[2], 'PX', math.max(pttl, 0) + 60000)
  announce(KEYS[1], ARGV[3])
end
return out
