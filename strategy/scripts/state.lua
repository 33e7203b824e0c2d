-- Prelude of inspect.lua and revoke.lua: state reads a lock for an
-- operator, without changing it.
-- KEYS[1] lock key, KEYS[2] the fencing counter of its slot, KEYS[3] the
-- lock's revocation note ("<token>\n<unix ms>\n<by>\n<reason>").
-- Returns {pttl, counter, waiters, n, the n bytes of the lock's value, m,
-- the m bytes of the note}: pttl is -2 when there is no lock; waiters
-- counts the subscribers of the lock's release channel, ordinary and
-- shard.
local function state()
  local out = {redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
  for _, sub in ipairs({'NUMSUB', 'SHARDNUMSUB'}) do
    local ok, r = pcall(redis.call, 'PUBSUB', sub, KEYS[1])
    if ok and type(r) == 'table' and r[2] then
      out[3] = out[3] + r[2]
    end
  end
  for _, s in ipairs({redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[3]) or ''}) do
    out[#out + 1] = #s
    for i = 1, #s do
      out[#out + 1] = string.byte(s, i)
    end
  end
  return out
end
