-- Resets the TTL of a lock the token holds.
-- KEYS[1] lock key. ARGV[1] token, ARGV[2] TTL in ms.
-- Replies {1, fence} when extended, {3, 0} when an operator revoked the
-- token's lock (revoke.lua's note, KEYS[1]..':revoked', in the same hash
-- slot, is read only then: a renewal names one key, so that it goes
-- through a Cluster slot migration), {0, 0} when the token does not hold
-- it otherwise.
local fence = held(redis.call('GET', KEYS[1]), ARGV[1])
if fence then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
local note = redis.call('GET', KEYS[1] .. ':revoked')
if note and string.sub(note, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  return {3, 0}
end
return {0, 0}
