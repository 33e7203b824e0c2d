-- Raises a fencing counter to at least a fence (Redlock's write-back round).
-- KEYS[1] fencing counter. ARGV[1] the fence, a positive integer.
-- Replies {counter} after the update, that is max(counter, ARGV[1]). The
-- counter never decreases, so the script may be retried or reordered freely.
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = tonumber(ARGV[1])
if c < t then
  redis.call('SET', KEYS[1], ARGV[1])
  return {t}
end
return {c}
