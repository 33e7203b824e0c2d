-- Prelude of acquire.lua: the amnesia guard.
--
-- A slot whose fencing counter is missing has never been used, or its
-- server lost the slot's data (a restart without persistence, FLUSHALL, an
-- empty replica promoted, eviction), and with it locks that may still be
-- held: such a slot grants nothing until the longest lease could have run
-- out. quarantine returns for how many milliseconds more the slot grants
-- nothing (0: it may grant now).
--
-- When the counter is missing it is created, at the server's clock in
-- microseconds, so that fences stay above every fence the slot issued
-- before (one per acquisition, fewer than a million a second), and the
-- quarantine is decided from what the server reports:
--   * it started less than maxttl ago: until maxttl after its start (a
--     restart: leases from before it ended by then), give or take Redis'
--     rounding of its uptime, which is taken against the lease;
--   * it reports a flush (FLUSHALL or FLUSHDB calls), evicted keys or a
--     promotion from replica (master_replid2 set), or cannot tell (INFO
--     refused): maxttl from now;
--   * otherwise (up for maxttl or longer, none of these): none, a slot
--     never used before.
-- The marker key holds a quarantine until it expires.
local function quarantine(counter, marker, maxttl)
  local q = redis.call('PTTL', marker)
  if q > 0 then
    return q
  end
  if redis.call('EXISTS', counter) == 1 then
    return 0
  end
  local t = redis.call('TIME')
  redis.call('SET', counter, string.format('%d', t[1] * 1000000 + t[2]))
  local function info(section)
    local ok, s = pcall(redis.call, 'INFO', section)
    if ok and type(s) == 'string' then
      return s
    end
    return nil
  end
  local server, stats, repl, cmds = info('server'), info('stats'), info('replication'), info('commandstats')
  local uptime = server and tonumber(string.match(server, 'uptime_in_seconds:(%d+)'))
  q = maxttl
  if uptime and stats and repl and cmds
      and tonumber(string.match(stats, 'evicted_keys:(%d+)') or '1') == 0
      and not string.find(cmds, 'cmdstat_flushall:', 1, true)
      and not string.find(cmds, 'cmdstat_flushdb:', 1, true)
      and string.match(repl, 'master_replid2:0+\r?\n') then
    -- Redis counts uptime in whole seconds of the wall clock, so it may
    -- be up to a second more than the time since the start: take one off.
    q = maxttl - (uptime - 1) * 1000
  end
  if q > 0 then
    redis.call('SET', marker, '1', 'PX', q)
  end
  return math.max(q, 0)
end
