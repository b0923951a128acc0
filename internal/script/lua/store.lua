-- store stores the computed value, releases the lock and wakes every
-- waiter, if the lock still holds our token; else it changes nothing and
-- returns 0. KEYS: value, lock, channel. ARGV: token, value, ttl ms,
-- PUBLISH or SPUBLISH, longest value to publish.
--@ store_step
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
return store(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
