-- Resets the TTL of a lock the token holds.
-- KEYS[1] lock key. ARGV[1] token, ARGV[2] TTL in ms.
-- Replies {1, fence} when extended, {0, 0} when the token does not hold it.
local fence = held(redis.call('GET', KEYS[1]), ARGV[1])
if fence then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
return {0, 0}
