-- Fenced write. KEYS[1]: the fence record; KEYS[2], when given: the data
-- key (same hash slot). ARGV[1]: the fence, decimal without leading zeros;
-- ARGV[2]: the operation (record, set, del, hset); then its arguments.
-- Replies {0} when a larger fence is recorded (nothing written), else
-- {1, result}. The data is written before the record, so a command error
-- (a key of the wrong type) leaves both unchanged.
local fence = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur and (#cur > #fence or (#cur == #fence and cur > fence)) then
  return {0}
end
local op = ARGV[2]
local result = 0
if op == 'set' then
  if ARGV[4] == '0' then
    redis.call('SET', KEYS[2], ARGV[3])
  else
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  end
elseif op == 'del' then
  result = redis.call('DEL', KEYS[2])
elseif op == 'hset' then
  local i = 3
  while i <= #ARGV do
    local last = math.min(i + 199, #ARGV)
    result = result + redis.call('HSET', KEYS[2], unpack(ARGV, i, last))
    i = last + 1
  end
elseif op ~= 'record' then
  return redis.error_reply('fencing: unknown operation ' .. op)
end
if cur ~= fence then
  redis.call('SET', KEYS[1], fence)
end
return {1, result}
