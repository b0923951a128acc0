package lock

import (
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/wake"
)

// An RWMutex keeps:
//
//	base   hash  {token: fence} with the writer's TTL
//	r      zset  {token: expiry ms}   one member per reader
//	rf     hash  {token: fence}       the readers' fences
//	ww     zset  {token: expiry ms}   writers waiting, each with its own lease
//	fence  counter (see fenceLib)
//	rq     zset  {token: expiry ms}   readers waiting, each with its own lease
//	ra     zset  {token: expiry ms}   readers admitted by the last writer
//
// A reader is admitted only while no writer holds the lock or waits for it
// (writer preference, as sync.RWMutex); a writer only when there is neither
// a writer nor a live reader, nor a reader admitted but not yet in. When a
// writer unlocks, the readers waiting at that moment (rq) are admitted
// (moved to ra) ahead of the next writer, as sync.RWMutex does, so that
// writers taking turns cannot starve readers either. Readers wait on
// channel rd (woken all at once), writers on wr (woken one per process).
const rwLib = semLib + `
local function prunez(z, h, now)
  local dead = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  for _, t in ipairs(dead) do if h then redis.call('HDEL', h, t) end end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', z, '-inf', now) end
  return #dead
end
`

// rwRLock admits token as a reader, returning {1, fence} (also for a
// retried request that already is one), or {0, ms to wait} while a writer
// holds the lock or waits for it, unless token was admitted by the last
// writer's unlock. In "wait" mode a refused reader registers (or renews) its
// place among the waiting readers.
// KEYS: base, r, rf, ww, fence, rq, ra. ARGV: token, ttl ms, mode,
// retention ms.
var rwRLock = redis.NewScript(rwLib + `
local now = clock()
local ttl = tonumber(ARGV[2])
prunez(KEYS[2], KEYS[3], now)
local f = redis.call('HGET', KEYS[3], ARGV[1])
if f then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  keep(KEYS[2], KEYS[3], now)
  return {1, tonumber(f)}
end
local function refuse(ms)
  if ARGV[3] == 'wait' then
    redis.call('ZADD', KEYS[6], now + ttl, ARGV[1])
    keep(KEYS[6], KEYS[6], now)
  end
  return {0, ms}
end
local w = redis.call('PTTL', KEYS[1])
if w ~= -2 then return refuse(w) end
prunez(KEYS[7], nil, now)
if redis.call('ZREM', KEYS[7], ARGV[1]) == 0 then
  prunez(KEYS[4], nil, now)
  local ww = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if #ww > 0 then return refuse(math.max(1, tonumber(ww[2]) - now)) end
end
redis.call('ZREM', KEYS[6], ARGV[1])
f = nextfence(KEYS[5], ARGV[4])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], f)
keep(KEYS[2], KEYS[3], now)
return {1, f}
`)

// rwLocked returns 1 if a writer or a live reader holds the lock, else 0.
// KEYS: base, r.
var rwLocked = redis.NewScript(lockedLib + `return held(KEYS[1], KEYS[2])`)

// rwRCancel withdraws a reader that gave up waiting: it leaves the waiting
// and the admitted readers, so it keeps no writer out.
// KEYS: rq, ra, wr channel. ARGV: token, PUBLISH or SPUBLISH.
var rwRCancel = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then redis.call(ARGV[2], KEYS[3], '` + wake.One + `') end
return 1
`)

// rwLock makes token the writer if there is neither a writer nor a live
// reader, admitted or in, returning {1, fence} (also for a retried
// request). Otherwise it returns {0, ms to wait} and, in "wait" mode,
// registers or renews token as a waiting writer, which keeps new readers
// out. KEYS: base, r, rf, ww, fence, rq, ra. ARGV: token, ttl ms, mode,
// retention ms.
var rwLock = redis.NewScript(rwLib + `
local now = clock()
local ttl = tonumber(ARGV[2])
local f = redis.call('HGET', KEYS[1], ARGV[1])
if f then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(f)}
end
prunez(KEYS[2], KEYS[3], now)
prunez(KEYS[4], nil, now)
prunez(KEYS[7], nil, now)
local w = redis.call('PTTL', KEYS[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if #last == 0 then last = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES') end
if w == -2 and #last == 0 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  f = nextfence(KEYS[5], ARGV[4])
  redis.call('HSET', KEYS[1], ARGV[1], f)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, f}
end
if ARGV[3] == 'wait' then
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
  keep(KEYS[4], KEYS[4], now)
end
if w ~= -2 then return {0, w} end
return {0, math.max(1, tonumber(last[2]) - now)}
`)

// rwRUnlock removes token as a reader; when it was the last, and no
// admitted reader is still to come in, it wakes one waiting writer per
// process. Returns 1 if token was a live reader.
// KEYS: r, rf, wr channel, ra. ARGV: token, PUBLISH or SPUBLISH.
var rwRUnlock = redis.NewScript(rwLib + `
local now = clock()
prunez(KEYS[1], KEYS[2], now)
local f = redis.call('HGET', KEYS[2], ARGV[1])
if not f then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
prunez(KEYS[4], nil, now)
if redis.call('ZCARD', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[4]) == 0 then
  redis.call(ARGV[2], KEYS[3], '` + wake.One + `')
end
return 1
`)

// rwUnlock releases token's write lock, admits the readers waiting at this
// moment ahead of the next writer, and wakes all readers and one writer per
// process; or, for a writer that gave up waiting, drops its registration
// and wakes the readers if no writer waits any more. Returns 1 if token
// held the write lock.
// KEYS: base, ww, rd channel, wr channel, rq, ra. ARGV: token, PUBLISH or
// SPUBLISH.
var rwUnlock = redis.NewScript(rwLib + `
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call(ARGV[2], KEYS[3], '` + wake.All + `')
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1])
local now = clock()
prunez(KEYS[5], nil, now)
local q = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')
for i = 1, #q, 2 do redis.call('ZADD', KEYS[6], q[i + 1], q[i]) end
if #q > 0 then
  redis.call('DEL', KEYS[5])
  keep(KEYS[6], KEYS[6], now)
end
redis.call(ARGV[2], KEYS[3], '` + wake.All + `')
redis.call(ARGV[2], KEYS[4], '` + wake.One + `')
return 1
`)

// hashExtend resets the TTL of an RWMutex's write lock, a hash {token:
// fence}, if it holds our token; it never re-creates a lock that expired.
// KEYS: base. ARGV: token, ttl ms.
var hashExtend = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// hashPTTL returns the write lock's PTTL if it holds our token, else -3.
// KEYS: base. ARGV: token.
var hashPTTL = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -3 end
return redis.call('PTTL', KEYS[1])
`)

// rwUpgrade turns reader token into the writer, keeping its fence, if it is
// the only live reader and no writer holds the lock; {1, fence}, else {0}.
// KEYS: base, r, rf. ARGV: token, ttl ms.
var rwUpgrade = redis.NewScript(rwLib + `
local now = clock()
prunez(KEYS[2], KEYS[3], now)
local f = redis.call('HGET', KEYS[3], ARGV[1])
if not f or redis.call('ZCARD', KEYS[2]) ~= 1 or redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], f)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, tonumber(f)}
`)
