-- store_tagged is store for a value with tags, on a server that holds
-- every key (not a Cluster or a Ring): if an epoch is no longer what
-- compute saw when it tagged the value (an InvalidateTag came since), it
-- stores nothing, releases the lock and wakes the waiters, who look again,
-- and returns -1; else it stores the value and adds it to each tag's set.
-- KEYS: value, lock, channel, then each tag's set and epoch. ARGV: as
-- store, then each tag's epoch as compute saw it ("" for none).
--@ store_step
--@ tag_step
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local n = (#KEYS - 3) / 2
for i = 1, n do
  if (redis.call('GET', KEYS[3 + 2*i]) or '') ~= ARGV[5 + i] then
    redis.call('DEL', KEYS[2])
    redis.call(ARGV[4], KEYS[3], WAKE_RELEASED)
    return -1
  end
end
if ARGV[3] ~= '0' then
  for i = 1, n do tagadd(KEYS[2 + 2*i], KEYS[1], ARGV[3]) end
end
return store(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
