-- Takes a lock and advances its fencing counter, in one step.
-- KEYS[1] lock key, KEYS[2] fencing counter (same hash slot).
-- ARGV[1] token, ARGV[2] TTL in milliseconds.
-- Replies {1, fence} when the token holds the lock (taken now, or already
-- held by the same token, whose TTL is then refreshed), or {0, pttl} when
-- another token holds it (pttl is -1 when the key has no TTL).
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, redis.call('INCR', KEYS[2])}
