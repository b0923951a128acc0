-- set stores a value given by the caller, takes the lock away from any
-- compute in progress (its fenced store then fails) and wakes waiters, who
-- read the new value. KEYS: value, lock, channel. ARGV: value, ttl ms,
-- PUBLISH or SPUBLISH.
--@ expiry
setv(KEYS[1], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[2])
redis.call(ARGV[3], KEYS[3], WAKE_STORED)
return 1
