-- Reports what the failover strategy needs to know about the server, as
-- integers: {major, minor, patch, is_primary (1 or 0), connected replicas,
-- aof_enabled (1 or 0)}. Writes nothing.
local function num(info, field)
  return tonumber(string.match(info, field .. ':(%d+)') or '0')
end
local server = redis.call('INFO', 'server')
local major, minor, patch = string.match(server, 'redis_version:(%d+)%.(%d+)%.(%d+)')
local repl = redis.call('INFO', 'replication')
local primary = 0
if string.match(repl, 'role:master') then
  primary = 1
end
local persistence = redis.call('INFO', 'persistence')
return {tonumber(major or '0'), tonumber(minor or '0'), tonumber(patch or '0'),
  primary, num(repl, 'connected_slaves'), num(persistence, 'aof_enabled')}
