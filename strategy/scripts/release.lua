-- Deletes a lock the token holds, and, when an acquisition was refused on
-- it (it is marked, see acquire.lua), announces the release (announce.lua).
-- KEYS[1] lock key (whose value is "<fence>:<token>"). ARGV[1] token.
-- ARGV[2], when the caller knows how its client reaches the server, as
-- announce's mode.
-- Replies {1} when deleted, {0} when the token does not hold it.
local v = redis.call('GET', KEYS[1])
if holds(v, ARGV[1]) then
  redis.call('DEL', KEYS[1])
  if marked(v) then
    announce(KEYS[1], ARGV[2])
  end
  return {1}
end
return {0}
