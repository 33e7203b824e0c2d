-- Deletes a lock the token holds, and announces the release on a channel
-- named like the lock key so that waiters wake at once.
-- KEYS[1] lock key (whose value is "<fence>:<token>"). ARGV[1] token.
-- Replies {1} when deleted, {0} when the token does not hold it.
if held(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], 'released')
  return {1}
end
return {0}
