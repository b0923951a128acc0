package lock

import "github.com/redis/go-redis/v9"

// Every script takes all the keys it touches in KEYS, all sharing one hash
// tag, and computes expiry only from relative milliseconds (PX, PEXPIRE) or
// the server's clock: no client timestamp ever reaches Redis.
//
// A mutex is a hash {token: fence} with a TTL, so that the token and the
// fencing number it was given live and die together.

// mutexAcquire takes the lock if it is free, or reports that it is already
// ours (a retried request whose first reply was lost: go-redis retries on
// network errors), returning {1, fence}; otherwise {0, holder's PTTL}.
// KEYS: lock, fence counter. ARGV: token, ttl ms.
var mutexAcquire = redis.NewScript(`
local t = redis.call('PTTL', KEYS[1])
if t == -2 then
  local f = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], f)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, f}
end
local f = redis.call('HGET', KEYS[1], ARGV[1])
if f then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(f)}
end
return {0, t}
`)

// mutexRelease deletes the lock if it holds our token and wakes one waiter
// per process (payload "1", see wake.One).
// KEYS: lock, wake channel. ARGV: token, PUBLISH or SPUBLISH.
var mutexRelease = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], KEYS[2], '1')
return 1
`)

// mutexExtend resets the TTL if the lock holds our token; it never
// re-creates a lock that expired. KEYS: lock. ARGV: token, ttl ms.
var mutexExtend = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// mutexPTTL returns the lock's PTTL if it holds our token, else -3.
// KEYS: lock. ARGV: token.
var mutexPTTL = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -3 end
return redis.call('PTTL', KEYS[1])
`)
