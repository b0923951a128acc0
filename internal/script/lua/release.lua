-- release deletes the lock if it holds our token and wakes waiters (one of
-- them takes over). It undoes an acquire whose reply was lost.
-- KEYS: lock, channel. ARGV: token, PUBLISH or SPUBLISH.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], KEYS[2], WAKE_RELEASED)
return 1
