-- Replies the run_id of the server that runs it (the master of KEYS[1]'s
-- slot on a Cluster; the key itself is not touched), as four integers of
-- ten hex digits each.
local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if not id or #id ~= 40 then
  return redis.error_reply('ERR no run_id in INFO server')
end
return {tonumber(string.sub(id, 1, 10), 16), tonumber(string.sub(id, 11, 20), 16),
  tonumber(string.sub(id, 21, 30), 16), tonumber(string.sub(id, 31, 40), 16)}
