-- void makes one value of an invalidated tag a miss, or with a stale
-- window (ARGV[2] ms > 0) stale, so that it is refreshed in the background;
-- takes the lock away from a compute in progress (its store is fenced off)
-- and wakes the waiters. KEYS: value, lock, channel. ARGV: PUBLISH or
-- SPUBLISH, stale window ms.
--@ expiry
local stale = tonumber(ARGV[2])
if stale == 0 then
  redis.call('DEL', KEYS[1])
elseif redis.call('PTTL', KEYS[1]) > stale then
  shorten(KEYS[1], ARGV[2])
end
redis.call('DEL', KEYS[2])
redis.call(ARGV[1], KEYS[3], WAKE_DELETED)
return 1
