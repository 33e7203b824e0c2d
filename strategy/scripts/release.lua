-- Deletes a lock the token holds, and announces the release on a channel
-- named like the lock key so that waiters wake at once: a shard channel
-- (SPUBLISH) on a Redis Cluster of version 7.0 or later, where an ordinary
-- PUBLISH would cross the cluster bus to every node; an ordinary channel
-- otherwise.
-- KEYS[1] lock key (whose value is "<fence>:<token>"). ARGV[1] token.
-- ARGV[2], when the caller knows how its client reaches the server: 's' for
-- a Cluster client (its waiters subscribe on shard channels), 'p' for a
-- client of one server (its waiters subscribe on ordinary channels, even
-- on a node of a Cluster). Without it the script asks the server whether
-- it runs in cluster mode.
-- Replies {1} when deleted, {0} when the token does not hold it.
if held(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('DEL', KEYS[1])
  local publish = 'PUBLISH'
  if ARGV[2] ~= 'p' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
    if ARGV[2] == 's' then
      publish = 'SPUBLISH'
    else
      local ok, info = pcall(redis.call, 'INFO', 'cluster')
      if ok and type(info) == 'string' and string.find(info, 'cluster_enabled:1', 1, true) then
        publish = 'SPUBLISH'
      end
    end
  end
  redis.call(publish, KEYS[1], 'released')
  return {1}
end
return {0}
