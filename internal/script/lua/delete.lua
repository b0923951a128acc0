-- delete deletes the value and takes the lock away from any compute in
-- progress, and wakes waiters, so that one of them computes afresh.
-- KEYS: value, lock, channel. ARGV: PUBLISH or SPUBLISH.
redis.call('DEL', KEYS[1], KEYS[2])
redis.call(ARGV[1], KEYS[3], WAKE_DELETED)
return 1
