-- Resets the TTL of a lock the token holds.
-- KEYS[1] lock key. ARGV[1] token, ARGV[2] TTL in ms.
-- Replies the fence, an integer, when extended, {3, 0} when an operator revoked the
-- token's lock (revoke.lua's note, KEYS[1]..':revoked', in the same hash
-- slot, is read only then: a renewal names one key, so that it goes
-- through a Cluster slot migration), {0, 0} when the token does not hold
-- it otherwise.
--
-- It reads the lock as held.lua's held does, written out here: a Lua
-- function made is a closure made on every run, which the server pays for.
local v = redis.call('GET', KEYS[1])
local i = v and string.find(v, ':', 1, true) -- v is false when the key is missing
if i and #v - i == #ARGV[1] and string.find(v, ARGV[1], i + 1, true) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(string.sub(v, 1, i - 1)) -- a marked fence's leading 0 reads as nothing
end
local note = redis.call('GET', KEYS[1] .. ':revoked')
if note and string.sub(note, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  return {3, 0}
end
return {0, 0}
