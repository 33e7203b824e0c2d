-- Redlock's write-back round: raises a slot's fencing counter to at least
-- a grant's fence, and makes that the fence of the token's lock.
-- KEYS[1] lock key, KEYS[2] the fencing counter of its slot.
-- ARGV[1] the fence, a positive integer; ARGV[2] the token.
-- Replies {counter} after the update, that is max(counter, ARGV[1]). The
-- counter never decreases, so the script may be retried or reordered freely;
-- the lock keeps its TTL, and is left alone when the token does not hold it.
local t = tonumber(ARGV[1])
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < t then
  redis.call('SET', KEYS[2], ARGV[1])
  c = t
end
local v = redis.call('GET', KEYS[1])
local fence = held(v, ARGV[2])
if fence and fence ~= t then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    local value = ARGV[1] .. ':' .. ARGV[2]
    if marked(v) then
      value = '0' .. value -- keeps the mark of a refusal (acquire.lua)
    end
    redis.call('SET', KEYS[1], value, 'PX', pttl)
  end
end
return {c}
