-- Reads an election's leader.
-- KEYS[1]: the election's lock key. KEYS[2]: the leader record.
-- Replies {0} when nobody holds the lock; {2, pttl} when it is held but
-- its holder has not announced itself yet; {1, pttl, term, bytes of the
-- value...} for the announced leader (pttl: the lock's, in ms).
local v = redis.call('GET', KEYS[1])
if not v then
  return {0}
end
if string.byte(v, 1) == 48 then
  v = string.sub(v, 2) -- a 0 marks a lock someone waits for (strategy.LockValue)
end
local pttl = redis.call('PTTL', KEYS[1])
local rec = redis.call('HMGET', KEYS[2], 'holder', 'value')
if rec[1] ~= v then
  return {2, pttl}
end
local out = {1, pttl, tonumber(string.match(v, '^(%d+):'))}
for i = 1, #rec[2] do
  out[#out + 1] = string.byte(rec[2], i)
end
return out
