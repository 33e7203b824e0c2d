-- Takes a lock, with a fence from its slot's counter, in one step.
-- KEYS[1] lock key, KEYS[2] the fencing counter of its slot, KEYS[3] the
-- lock's own counter of earlier versions, and with the amnesia guard
-- KEYS[4] the slot's quarantine marker (all in one hash slot).
-- ARGV[1] token, ARGV[2] TTL in milliseconds, and with the amnesia guard
-- ARGV[3] the longest lease any client takes (WithMaxTTL), in milliseconds.
-- The lock's value is "<fence>:<token>".
-- Replies {1, fence} when the token holds the lock (taken now, or already
-- held by the same token, whose TTL is then refreshed and whose fence
-- stays), {0, pttl} when another token holds it (pttl is -1 when the key
-- has no TTL), or {2, ms} when the slot is quarantined for ms more.

-- nextFence takes the next fence from counter, folding in old, a lock's
-- counter of an earlier version, so that fences never go back.
local function nextFence(counter, old)
  local fence = redis.call('INCR', counter)
  local was = tonumber(redis.call('GET', old))
  if was then
    redis.call('DEL', old)
    if was >= fence then
      fence = was + 1
      redis.call('SET', counter, string.format('%d', fence))
    end
  end
  return fence
end

-- taken replies for the lock key, whose value is v: refreshed to ttl when
-- token holds it, else its PTTL.
local function taken(key, v, token, ttl)
  local fence = held(v, token)
  if fence then
    redis.call('PEXPIRE', key, ttl)
    return {1, fence}
  end
  return {0, redis.call('PTTL', key)}
end
-- body
if not ARGV[3] and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  -- Three commands for a free lock: a fence is taken before it is known
  -- whether the lock is free (fences need only grow), and SET NX GET says.
  local fence = nextFence(KEYS[2], KEYS[3])
  local v = redis.call('SET', KEYS[1], string.format('%d', fence) .. ':' .. ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
  if not v then
    return {1, fence}
  end
  return taken(KEYS[1], v, ARGV[1], ARGV[2])
end
local v = redis.call('GET', KEYS[1])
if v then
  return taken(KEYS[1], v, ARGV[1], ARGV[2])
end
if ARGV[3] then
  local q = quarantine(KEYS[2], KEYS[3], KEYS[4], tonumber(ARGV[3]))
  if q > 0 then
    return {2, q}
  end
end
local fence = nextFence(KEYS[2], KEYS[3])
redis.call('SET', KEYS[1], string.format('%d', fence) .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, fence}
