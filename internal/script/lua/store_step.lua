-- store stores the computed value, releases the lock and wakes every
-- waiter; the caller checked the lock. A ttl of '0' stores nothing
-- (compute asked not to store its result) but still hands the value to the
-- waiters. The wake-up carries the token and the value,
-- WAKE_STORED..token..":"..value, if the value is at most maxwake bytes
-- long, so that waiters need not read it again (see Cache.storedBy); else
-- it is WAKE_STORED alone.
--@ expiry
local function store(vk, lk, ch, token, v, ttl, pub, maxwake)
  if ttl ~= '0' then setv(vk, v, ttl) end
  redis.call('DEL', lk)
  local m = WAKE_STORED
  if #v <= tonumber(maxwake) then m = m .. token .. ':' .. v end
  redis.call(pub, ch, m)
  return 1
end
