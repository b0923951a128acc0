-- fail releases the lock after a failed compute, records the error text
-- under our token for waiters (for ARGV[3] ms) and wakes them, if the lock
-- still holds our token. With ARGV[5] > 0 it also sets the throttle key for
-- that many ms, so that no process refreshes the value in the background
-- again before then; with ARGV[6] = "drop" it deletes the value (compute
-- found that it no longer exists). KEYS: lock, errs, channel, throttle,
-- value. ARGV: token, text, marker ttl ms, PUBLISH or SPUBLISH, throttle
-- ms, "drop" or "".
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[4], '1', 'PX', ARGV[5]) end
if ARGV[6] == 'drop' then redis.call('DEL', KEYS[5]) end
redis.call(ARGV[4], KEYS[3], WAKE_FAILED)
return 1
