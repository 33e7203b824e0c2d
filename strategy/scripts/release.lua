-- Deletes a lock the token holds, and, when an acquisition was refused on
-- it (it is marked, see acquire.lua), announces the release (announce.lua).
-- KEYS[1] lock key (whose value is "<fence>:<token>"). ARGV[1] token.
-- The strategy runs it after a line that sets mode, announce's mode.
-- Replies 1 when deleted, 0 when the token does not hold it.
--
-- It reads the lock as held.lua's holds and marked do, written out here:
-- a Lua function made is a closure made on every run, which the server
-- pays for. announce is made only when the release announces.
local v = redis.call('GET', KEYS[1])
local i = v and string.find(v, ':', 1, true) -- v is false when the key is missing
if i and #v - i == #ARGV[1] and string.find(v, ARGV[1], i + 1, true) then
  redis.call('DEL', KEYS[1])
  if string.byte(v, 1) == 48 then -- marked
    -- prelude
    announce(KEYS[1], mode)
  end
  return 1
end
return 0
