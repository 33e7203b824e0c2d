-- Takes a lock, with a fence from its slot's counter, in one step.
-- KEYS[1] lock key, KEYS[2] the fencing counter of its slot, and with the
-- amnesia guard KEYS[3] the slot's quarantine marker (all in one hash slot).
-- ARGV[1] token, ARGV[2] TTL in milliseconds, ARGV[3] with the amnesia
-- guard the longest lease any client takes (WithMaxTTL) in milliseconds,
-- else absent or "0". For a hand-off, ARGV[4] is the token that holds the
-- lock: it is taken from that token in one step, and only from it.
-- The lock's value is "<fence>:<token>" (held.lua).
-- Replies the fence, an integer, when the token holds the lock (taken now,
-- or already held by the same token, whose TTL is then refreshed and whose
-- fence stays), {0, pttl} when another token holds it (pttl is -1 when the
-- key has no TTL; -2 for a hand-off whose token does not hold it), or
-- {2, ms} when the slot is quarantined for ms more. A grant is an integer,
-- not an array: a server spends thousands of instructions turning a Lua
-- table into a reply.
--
-- A refusal marks the lock (a 0 before its fence), so that its release
-- publishes (release.lua): a release nobody waits for publishes nothing.
-- The usual case takes the counter's next value before it knows the lock
-- is free, and gives it back when it is not (no other call runs in
-- between): the fences of a slot stay consecutive, which the Manager reads
-- as a sign that no other process took the key.
--
-- The usual case (two arguments: no hand-off, no amnesia guard) on Redis
-- 7.0 or later comes first and, when it grants, returns before the helper
-- functions below are defined: a Lua function made is a closure made on
-- every run, which the server pays for.
local v, fence
if not ARGV[3] and redis.REDIS_VERSION_NUM then
  -- One INCR, one SET that also answers what it found. SET takes NX and
  -- GET together from Redis 7.0, which is also where
  -- redis.REDIS_VERSION_NUM begins: an older server takes the path below.
  -- string.format, not .., makes the fence's text: Lua writes a number
  -- above 1e14 (the amnesia guard's counters) in exponent form.
  fence = redis.call('INCR', KEYS[2])
  v = redis.call('SET', KEYS[1], string.format('%d', fence) .. ':' .. ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if not v then
    return fence
  end
elseif not redis.REDIS_VERSION_NUM and not redis.setresp then
  -- Before Redis 6.0 (where redis.setresp begins) SET has no KEEPTTL,
  -- which a refusal needs: every acquisition fails with this error before
  -- it writes anything, and dlm.Permanent makes Lock return it at once.
  -- Raised, not returned, so that a batch of calls (internal/coalesce)
  -- sends the call again by itself; the server replies "ERR Error running
  -- script (...): @user_script:<line>: ERR dlm needs ...", which
  -- nodekit.Reply reads as this ERR.
  error('ERR dlm needs Redis 6.0 or later (SET KEEPTTL); this server is older', 0)
end
-- prelude

-- refuse marks the lock key, whose value is v, and replies its TTL.
local function refuse(key, v)
  if not marked(v) then
    redis.call('SET', key, '0' .. v, 'KEEPTTL')
  end
  return {0, redis.call('PTTL', key)}
end

if fence then -- the usual case, refused by the lock it found
  if fence == 1 then
    redis.call('DEL', KEYS[2]) -- the counter was missing: it stays so
  else
    redis.call('DECR', KEYS[2])
  end
  local f = held(v, ARGV[1])
  if f then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return f
  end
  return refuse(KEYS[1], v)
end
-- A hand-off, the amnesia guard (whose counter must be read before an INCR
-- creates it), or a server before 7.0: read the lock first.
local from, maxttl = ARGV[4], ARGV[3]
v = redis.call('GET', KEYS[1])
if from then
  if not holds(v, from) then
    return {0, redis.call('PTTL', KEYS[1])}
  end
else
  local f = held(v, ARGV[1])
  if f then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return f
  end
  if v then
    return refuse(KEYS[1], v)
  end
end
if maxttl and maxttl ~= '0' then -- tonumber costs a strtod: only when set
  local q = quarantine(KEYS[2], KEYS[3], tonumber(maxttl))
  if q > 0 then
    return {2, q}
  end
end
fence = redis.call('INCR', KEYS[2])
local value = string.format('%d', fence) .. ':' .. ARGV[1]
if from and marked(v) then
  value = '0' .. value -- whoever waited for from's lock waits for this one
end
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return fence
