-- The arrival queue of a fair lock.
-- KEYS[1]: the queue, a sorted set of waiters' tokens by arrival number.
-- KEYS[2]: a sorted set of the same tokens by the server time (ms) after
--          which their waiter is presumed dead, unless it calls again.
-- KEYS[3]: the arrival counter. KEYS[4]: the lock (see strategy/scripts).
-- ARGV[1]: the waiter's token. ARGV[2]: its lease, in ms.
-- ARGV[3]: 'w' to join the queue or stay in it, 'l' to leave it.
-- Replies {position (0: head), arrival number, ms the head has left}.
-- The three keys expire together once nobody has called for two leases.
--
-- Leaving, when others still wait, marks the lock as a refused acquisition
-- does (strategy/scripts/acquire.lua), so that its release publishes: a
-- waiter behind the head never tries the lock, and the head that took it
-- (and leaves now) took it unmarked.
local token = ARGV[1]
if ARGV[3] == 'l' then
  redis.call('ZREM', KEYS[1], token)
  redis.call('ZREM', KEYS[2], token)
  if redis.call('ZCARD', KEYS[1]) > 0 then
    local v = redis.call('GET', KEYS[4])
    if v and string.byte(v, 1) ~= 48 then -- held and not marked ('0')
      redis.call('SET', KEYS[4], '0' .. v, 'KEEPTTL')
    end
  end
  return {-1, 0, 0}
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 64)
for _, d in ipairs(dead) do
  redis.call('ZREM', KEYS[1], d)
  redis.call('ZREM', KEYS[2], d)
end
local arrival = redis.call('ZSCORE', KEYS[1], token)
if arrival then
  arrival = tonumber(arrival)
else
  arrival = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[1], arrival, token)
end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], now + lease, token)
for i = 1, 3 do
  if redis.call('PTTL', KEYS[i]) < 2 * lease then
    redis.call('PEXPIRE', KEYS[i], 2 * lease)
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local left = tonumber(redis.call('ZSCORE', KEYS[2], head)) - now
return {redis.call('ZRANK', KEYS[1], token), arrival, left}
