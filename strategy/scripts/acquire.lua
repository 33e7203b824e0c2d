-- Takes a lock, with a fence from its slot's counter, in one step.
-- KEYS[1] lock key, KEYS[2] the fencing counter of its slot, KEYS[3] the
-- lock's own counter of earlier versions, and with the amnesia guard
-- KEYS[4] the slot's quarantine marker (all in one hash slot).
-- ARGV[1] token, ARGV[2] TTL in milliseconds, ARGV[3] with the amnesia
-- guard the longest lease any client takes (WithMaxTTL) in milliseconds,
-- else absent or "0". For a hand-off, ARGV[4] is the token that holds the
-- lock: it is taken from that token in one step, and only from it.
-- The lock's value is "<fence>:<token>".
-- Replies {1, fence} when the token holds the lock (taken now, or already
-- held by the same token, whose TTL is then refreshed and whose fence
-- stays), {0, pttl} when another token holds it (pttl is -1 when the key
-- has no TTL; -2 for a hand-off whose token does not hold it), or {2, ms}
-- when the slot is quarantined for ms more.
local v = redis.call('GET', KEYS[1])
if ARGV[4] then
  if not holds(v, ARGV[4]) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
else
  local fence = held(v, ARGV[1])
  if fence then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, fence}
  end
  if v then
    return {0, redis.call('PTTL', KEYS[1])}
  end
end
local maxttl = ARGV[3] -- read only when set: tonumber costs a strtod
if maxttl and maxttl ~= '0' then
  local q = quarantine(KEYS[2], KEYS[3], KEYS[4], tonumber(maxttl))
  if q > 0 then
    return {2, q}
  end
end
local fence = redis.call('INCR', KEYS[2])
local old = tonumber(redis.call('GET', KEYS[3]))
if old then
  -- A counter of an earlier version: fold it in, so fences never go back.
  redis.call('DEL', KEYS[3])
  if old >= fence then
    fence = old + 1
    redis.call('SET', KEYS[2], string.format('%d', fence))
  end
end
redis.call('SET', KEYS[1], string.format('%d', fence) .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, fence}
