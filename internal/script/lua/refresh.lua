-- refresh takes the compute lock for a background refresh of a value that
-- is still there (stale, or due for an early refresh). It returns 1 if the
-- caller now holds the lock; 0 if another process holds it (it refreshes),
-- if a refresh failed less than the retry interval ago (the throttle key
-- exists), or if the value's PTTL is above ARGV[3] ms (someone refreshed
-- it already). KEYS: value, lock, throttle. ARGV: token, lease ms, highest
-- PTTL that still needs a refresh.
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('PTTL', KEYS[1]) > tonumber(ARGV[3]) then return 0 end
local h = redis.call('GET', KEYS[2])
if h == ARGV[1] then return 1 end
if h then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
