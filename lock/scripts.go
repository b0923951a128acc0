package lock

import (
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/wake"
)

// Every script takes all the keys it touches in KEYS, all sharing one hash
// tag, and computes expiry only from relative milliseconds (PX, PEXPIRE) or
// the server's clock: no client timestamp ever reaches Redis. This file
// holds the scripts of semaphores (and fair mutexes) and Redlock's
// acquire; those of the plain mutex are in mutex_scripts.go, those of
// RWMutex in rw_scripts.go.

// lockedLib tells whether a lock key is held: the key exists (it always
// carries a TTL when it is ours), or a zset of holders scored by expiry
// (server time, ms) has a live member.
const lockedLib = `
local function held(key, holders)
  if redis.call('EXISTS', key) == 1 then return 1 end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('ZCOUNT', holders, '(' .. now, '+inf') > 0 then return 1 end
  return 0
end
`

// redlockAcquire takes a Redlock's key on one of its servers if it is
// free, or if it already holds our value (a request go-redis sent again
// after its reply was lost), and returns 1; otherwise it returns
// {-1 - the holder's PTTL, 0}, or 0 for a key without TTL (foreign data),
// as mutexAcquire does. An attempt barred on this server (see redlockBar)
// is refused as busy: it arrived after its caller gave up on it. It draws
// no fence: a Redlock's servers share no counter, so it has no fencing
// numbers and keeps no counter key. The lock's value and its release,
// extension and TTL are a plain mutex's.
// KEYS: lock, the attempt's bar. ARGV: "token:", ttl ms.
var redlockAcquire = redis.NewScript(redlockAcquireSrc)

const redlockAcquireSrc = `
local bar = redis.call('PTTL', KEYS[2])
if bar > 0 then return {-1 - bar, 0} end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local t = redis.call('PTTL', KEYS[1])
if t < 0 then return 0 end
return {-1 - t, 0}
`

// redlockBar undoes an attempt whose outcome on this server is unknown
// (its request failed after it may have been sent, so it may still
// arrive): it frees the key if the attempt took it, and bars the attempt
// for a while, so that a request still on its way, or held by a stopped
// server, takes nothing when it lands, even after the lease's release.
// Returns 1 if it freed the key. KEYS: lock, the attempt's bar. ARGV:
// "token:", bar ms.
var redlockBar = redis.NewScript(redlockBarSrc)

const redlockBarSrc = `
redis.call('SET', KEYS[2], 1, 'PX', ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`

// mutexLocked returns 1 if a plain or a fair (WithFair) holder holds the
// mutex, else 0. A lock reserved for a waiter ("~ticket") is not held.
// KEYS: lock, fair holders.
var mutexLocked = redis.NewScript(lockedLib + `
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'string' and string.sub(v, 1, 1) == '~' then return 0 end
return held(KEYS[1], KEYS[2])`)

// A semaphore (and a fair mutex, a semaphore of one permit) keeps:
//
//	h      zset  {token: expiry ms, server time}  one member per holder
//	n      hash  {token: "permits:fence"}
//	q      zset  {token: sequence}                 the FIFO queue of waiters
//	qx     zset  {token: expiry ms}                each ticket's own lease
//	fence  counter (see fenceLib); also numbers the queue
//	base   the plain mutex key of the same name: busy while it exists
//
// Each zset gets a PEXPIRE at its latest score, so an abandoned semaphore
// leaves only its counter behind, until the retention passes. Expired members are pruned at the start
// of every script, so the count of permits in use is always derived from
// live holders: a double release or a dead holder can never inflate it.
const semLib = fenceLib + `
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function prune(h, n, q, qx, now)
  local dead = redis.call('ZRANGEBYSCORE', h, '-inf', now)
  for _, t in ipairs(dead) do redis.call('HDEL', n, t) end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', h, '-inf', now) end
  local gone = redis.call('ZRANGEBYSCORE', qx, '-inf', now)
  for _, t in ipairs(gone) do redis.call('ZREM', q, t) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', qx, '-inf', now) end
  local used = 0
  for _, v in ipairs(redis.call('HVALS', n)) do used = used + tonumber(string.match(v, '^%d+')) end
  return used
end
local function keep(z, other, now)
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if #last == 0 then return end
  local d = math.max(1, tonumber(last[2]) - now)
  redis.call('PEXPIRE', z, d)
  redis.call('PEXPIRE', other, d)
end
local function wakehead(q, used, permits, prefix, pub)
  if used >= permits then return end
  local head = redis.call('ZRANGE', q, 0, 0)
  if #head > 0 then redis.call(pub, prefix .. head[1], '` + wake.One + `') end
end
`

// semAcquire grants n permits to token if it heads the queue (or the queue
// is empty) and n are free, returning {1, fence}; a retried request that
// already holds them gets the same answer. Otherwise it returns {0, ms to
// wait} and, in "wait" mode, queues token (once) and renews its ticket.
// When permits are left after a grant, the next waiter is woken.
// A fair mutex's grant also sets the plain mutex's key to "token:fence"
// with the same TTL, so plain lockers find the lock busy at once.
// KEYS: h, n, q, qx, fence, base. ARGV: token, n, permits, ttl ms, mode,
// wake channel prefix, PUBLISH or SPUBLISH, retention ms, "1" for a fair
// mutex.
var semAcquire = redis.NewScript(semLib + `
local now = clock()
local used = prune(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now)
local tok, want, permits, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local mine = redis.call('HGET', KEYS[2], tok)
if mine then
  redis.call('ZADD', KEYS[1], now + ttl, tok)
  keep(KEYS[1], KEYS[2], now)
  if ARGV[9] == '1' and ours(redis.call('GET', KEYS[6]), tok) then redis.call('PEXPIRE', KEYS[6], ttl) end
  return {1, tonumber(string.match(mine, ':(%d+)$'))}
end
local base = redis.call('PTTL', KEYS[6])
local head = redis.call('ZRANGE', KEYS[3], 0, 0)
if base == -2 and (#head == 0 or head[1] == tok) and used + want <= permits then
  redis.call('ZREM', KEYS[3], tok)
  redis.call('ZREM', KEYS[4], tok)
  local f = nextfence(KEYS[5], ARGV[8])
  redis.call('ZADD', KEYS[1], now + ttl, tok)
  redis.call('HSET', KEYS[2], tok, want .. ':' .. digits(f))
  keep(KEYS[1], KEYS[2], now)
  if ARGV[9] == '1' then redis.call('SET', KEYS[6], tok .. ':' .. digits(f), 'PX', ttl) end
  wakehead(KEYS[3], used + want, permits, ARGV[6], ARGV[7])
  return {1, f}
end
local wait = ttl
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then wait = tonumber(first[2]) - now end
if base > 0 then wait = math.min(wait, base) end
if ARGV[5] == 'wait' then
  if not redis.call('ZSCORE', KEYS[3], tok) then
    redis.call('ZADD', KEYS[3], nextfence(KEYS[5], ARGV[8]), tok)
  end
  redis.call('ZADD', KEYS[4], now + ttl, tok)
  keep(KEYS[4], KEYS[3], now)
end
return {0, math.max(wait, 1)}
`)

// semRelease frees token's permits and drops its ticket, if any, then wakes
// the head of the queue. It returns 1 if token held live permits, else 0
// (so a second release changes nothing). A fair mutex's release also
// deletes the plain key it set and wakes plain waiters that marked it.
// KEYS: h, n, q, qx[, base, plain wake channel]. ARGV: token, permits,
// wake channel prefix, PUBLISH or SPUBLISH[, "1" for a fair mutex].
var semRelease = redis.NewScript(semLib + `
local now = clock()
local used = prune(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now)
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  used = used - tonumber(string.match(held, '^%d+'))
  if ARGV[5] == '1' then
    local v = redis.call('GET', KEYS[5])
    if ours(v, ARGV[1]) then
      redis.call('DEL', KEYS[5])
      if string.find(v, '+', 1, true) then redis.call(ARGV[4], KEYS[6], '` + wake.One + `') end
    end
  end
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
wakehead(KEYS[3], used, tonumber(ARGV[2]), ARGV[3], ARGV[4])
if held then return 1 end
return 0
`)

// semExtend renews token's permits (or a reader of an RWMutex: KEYS r, rf)
// if they are still live, and a fair mutex's plain key; it never
// re-creates expired ones.
// KEYS: h, n[, base]. ARGV: token, ttl ms[, "1" for a fair mutex].
var semExtend = redis.NewScript(semLib + `
local now = clock()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
keep(KEYS[1], KEYS[2], now)
if ARGV[3] == '1' and ours(redis.call('GET', KEYS[3]), ARGV[1]) then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
return 1
`)

// semPTTL returns the ms left on token's permits, or -3 if it holds none.
// KEYS: h. ARGV: token.
var semPTTL = redis.NewScript(semLib + `
local now = clock()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return -3 end
return tonumber(s) - now
`)

// semAvailable returns the permits not held by a live holder.
// KEYS: h, n, q, qx. ARGV: permits.
var semAvailable = redis.NewScript(semLib + `
local used = prune(KEYS[1], KEYS[2], KEYS[3], KEYS[4], clock())
return tonumber(ARGV[1]) - used
`)
