-- Tail of the failover strategy's scripts. The strategy wraps acquire.lua or
-- extend.lua in a function, calls it into the local r, and appends this: it
-- adds to the reply the number of replicas the primary has connected, read
-- from INFO replication after the script's writes. A grant's reply, the
-- fence alone, becomes {1, fence} first.
if type(r) == 'number' then
  r = {1, r}
end
local info = redis.call('INFO', 'replication')
r[#r + 1] = tonumber(string.match(info, 'connected_slaves:(%d+)') or '0')
return r
