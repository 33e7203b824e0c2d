-- Announces a leader, or its resignation, of an election.
-- KEYS[1]: the election's lock key, whose value is "<fence>:<token>".
-- KEYS[2]: the leader record, a hash {holder = lock value, value}; also the
--          name of the channel changes are published on.
-- ARGV[1]: the leader's lock value. ARGV[2]: 'a' to announce, 'r' to resign.
-- ARGV[3]: the leader's value (to announce). ARGV[4]: 's' to publish on a
--          shard channel (a Cluster client), anything else PUBLISH.
-- Publishes "<term> <value>" on announcing, "0 <term>" on resigning.
-- Replies {1} when done, {0} when ARGV[1] no longer holds the lock (or,
-- to resign, is not the recorded leader).
local publish = 'PUBLISH'
if ARGV[4] == 's' then
  publish = 'SPUBLISH'
end
local term = string.match(ARGV[1], '^(%d+):')
if ARGV[2] == 'a' then
  local v = redis.call('GET', KEYS[1])
  if v and string.byte(v, 1) == 48 then
    v = string.sub(v, 2) -- a 0 marks a lock someone waits for (strategy.LockValue)
  end
  if v ~= ARGV[1] then
    return {0}
  end
  redis.call('HSET', KEYS[2], 'holder', ARGV[1], 'value', ARGV[3])
  redis.call(publish, KEYS[2], term .. ' ' .. ARGV[3])
  return {1}
end
if redis.call('HGET', KEYS[2], 'holder') ~= ARGV[1] then
  return {0}
end
redis.call('DEL', KEYS[2])
redis.call(publish, KEYS[2], '0 ' .. term)
return {1}
