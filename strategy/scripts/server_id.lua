-- Replies the run_id of the server that runs it (the master of KEYS[1]'s
-- slot on a Cluster; the key itself is not touched), as four integers of
-- ten hex digits each, or an empty array when the server cannot tell (an
-- ACL that denies INFO, a server without run_id).
local ok, info = pcall(redis.call, 'INFO', 'server')
local id = ok and type(info) == 'string' and string.match(info, 'run_id:(%x+)')
if not id or #id ~= 40 then
  return {}
end
return {tonumber(string.sub(id, 1, 10), 16), tonumber(string.sub(id, 11, 20), 16),
  tonumber(string.sub(id, 21, 30), 16), tonumber(string.sub(id, 31, 40), 16)}
