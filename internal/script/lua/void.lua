-- void makes one value of an invalidated tag (or one Expire names) a miss,
-- or with a stale window (ARGV[2] ms > 0) stale, so that it is refreshed in
-- the background; a not-found tombstone has no value to serve stale, so it
-- goes. It takes the lock away from a compute in progress (its store is
-- fenced off) and wakes the waiters. KEYS: value, lock, channel. ARGV:
-- PUBLISH or SPUBLISH, stale window ms.
--@ expiry
local function tombstone(vk)
  -- internal/entry: 'dp', the version, for version 3 the 8-byte expiry,
  -- then the flags, whose lowest bit is FlagNotFound.
  local h = redis.pcall('GETRANGE', vk, 0, 11)
  if type(h) ~= 'string' or string.sub(h, 1, 2) ~= 'dp' then return false end
  local at = ({[2] = 4, [3] = 12})[string.byte(h, 3)]
  return at ~= nil and #h >= at and string.byte(h, at) % 2 == 1
end
local stale = tonumber(ARGV[2])
if stale == 0 or tombstone(KEYS[1]) then
  redis.call('DEL', KEYS[1])
elseif redis.call('PTTL', KEYS[1]) > stale then
  shorten(KEYS[1], ARGV[2])
end
redis.call('DEL', KEYS[2])
redis.call(ARGV[1], KEYS[3], WAKE_DELETED)
return 1
