-- Prelude of the scripts that free a lock (release.lua, revoke.lua):
-- announce tells waiters that key's lock may be free, on a channel named
-- like the lock key so that they wake at once: a shard channel (SPUBLISH)
-- on a Redis Cluster of version 7.0 or later, where an ordinary PUBLISH
-- would cross the cluster bus to every node; an ordinary channel otherwise.
-- mode, when the caller knows how its client reaches the server: 's' for a
-- Cluster client (its waiters subscribe on shard channels), 'p' for a
-- client of one server (its waiters subscribe on ordinary channels, even
-- on a node of a Cluster). Without it, the server is asked whether it runs
-- in cluster mode.
local function announce(key, mode)
  local publish = 'PUBLISH'
  if mode ~= 'p' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
    if mode == 's' then
      publish = 'SPUBLISH'
    else
      local ok, info = pcall(redis.call, 'INFO', 'cluster')
      if ok and type(info) == 'string' and string.find(info, 'cluster_enabled:1', 1, true) then
        publish = 'SPUBLISH'
      end
    end
  end
  redis.call(publish, key, 'released')
end
