package dogpile

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// Every script takes all the keys it touches in KEYS, all sharing one hash
// tag, and computes expiry only from relative milliseconds (PX, PEXPIRE) or
// from the server's own TIME (see expiryLua): no client timestamp ever
// reaches Redis. The compute lock is a string holding the holder's random
// token; every write a holder makes checks that token first (fenced).

// lookLua is the miss path's step for one key, GET-or-lock, shared by
// fetchScript and fetchManyScript. It returns {0, value} if the value is
// present (and is not the undecodable value whose SHA1 is bad); {1} if the
// caller now holds the compute lock (also for a retried request that
// already took it); {2, holder, pttl} if another holder computes; {3, text}
// if the compute of holder seen, which the caller waited for, failed with
// that error text. With force = "force" (Refresh) a present value is passed
// over unless the holder the caller waited for (seen) is gone: then the
// value is that holder's result. So that a holder that failed or died is
// not taken for one that stored, a Refresh's busy reply carries the SHA1 of
// the value it passed over, {2, holder, pttl, sha1}, which the caller then
// gives as bad: that value is never the result of the compute it awaited.
// A value's SHA1 leaves out its expiry (ident; sha1hex in Go), which a
// stale InvalidateTag stamps again without making it another value.
// A value key of another type (see notString) reads as none: SET replaces it.
const lookLua = identLua + `
local function look(vk, lk, ek, token, lease, seen, bad, force)
  local v = redis.pcall('GET', vk)
  if type(v) ~= 'string' then v = false end
  local h = redis.call('GET', lk)
  local take = force == '' or (seen ~= '' and h ~= seen)
  if v and take and (bad == '' or ident(v) ~= bad) then return {0, v} end
  if h == token then return {1} end
  if h and v and force ~= '' then return {2, h, redis.call('PTTL', lk), ident(v)} end
  if h then return {2, h, redis.call('PTTL', lk)} end
  if seen ~= '' then
    local e = redis.call('HGET', ek, seen)
    if e then return {3, e} end
  end
  redis.call('SET', lk, token, 'PX', lease)
  return {1}
end
`

// identLua is a value's identity: the SHA1 of its entry without its
// expiry (see sha1hex).
const identLua = `
local function ident(v)
  if #v >= 11 and string.sub(v, 1, 3) == 'dp\3' then v = string.sub(v, 1, 3) .. string.sub(v, 12) end
  return redis.sha1hex(v)
end
`

// undoSetScript deletes the value a Set stored, if it is still there: a
// SetTagged whose tag step failed undoes its value, but not a later
// writer's (whose store it would turn into a miss). The lock and the
// waiters are left alone: the Set took the lock already, and a later
// holder's is not ours to take. KEYS: value. ARGV: the entry the Set sent.
var undoSetScript = redis.NewScript(identLua + `
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or ident(v) ~= ident(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// Replies of fetchScript (the first element of its array reply).
const (
	replyValue  = 0 // {0, value}: the value is there
	replyLocked = 1 // {1}: the caller holds the compute lock
	replyBusy   = 2 // {2, holder, pttl[, sha1 of the value passed over]}: another holder computes
	replyFailed = 3 // {3, text}: the compute of the awaited holder failed
)

// fetchScript is the miss path's one round trip for one key: look.
// KEYS: value, lock, errs. ARGV: token, lease ms[, awaited holder or "",
// SHA1 of a value to treat as absent or "", "force" or ""].
//
// The common call, a Fetch's first look (no holder awaited, no value to pass
// over), sends the first two arguments only and is over in the script's
// first lines, look's for that case: the functions that follow are built
// anew on every call, which costs the server more than those lines do.
var fetchScript = redis.NewScript(`
if not ARGV[3] then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' then return {0, v} end
  local h = redis.call('GET', KEYS[2])
  if h and h ~= ARGV[1] then return {2, h, redis.call('PTTL', KEYS[2])} end
  if not h then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
  return {1}
end
` + lookLua + `
return look(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
`)

// fetchManyScript is FetchMany's first lock attempt for the missing keys
// of one cluster slot: look for each, with one token for all. It returns
// look's reply per key, in order. KEYS: value, lock, errs of each key.
// ARGV: token, lease ms, then per key the SHA1 of a value to treat as
// absent or "".
var fetchManyScript = redis.NewScript(lookLua + `
local out = {}
for i = 1, #KEYS / 3 do
  out[i] = look(KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i], ARGV[1], ARGV[2], '', ARGV[2+i], '')
end
return out
`)

// refreshScript takes the compute lock for a background refresh of a value
// that is still there (stale, or due for an early refresh). It returns 1 if
// the caller now holds the lock; 0 if another process holds it (it
// refreshes), if a refresh failed less than the retry interval ago (the
// throttle key exists), or if the value's PTTL is above ARGV[3] ms (someone
// refreshed it already). KEYS: value, lock, throttle. ARGV: token, lease
// ms, highest PTTL that still needs a refresh.
var refreshScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('PTTL', KEYS[1]) > tonumber(ARGV[3]) then return 0 end
local h = redis.call('GET', KEYS[2])
if h == ARGV[1] then return 1 end
if h then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
`)

// storeScript stores the computed value, releases the lock and wakes every
// waiter, if the lock still holds our token; else it changes nothing and
// returns 0. A ttl of 0 stores nothing (compute asked not to store its
// result) but still hands the value to the waiters. The wake-up carries our
// token and the value, "v"..token..":"..value, if the value is at most
// ARGV[5] bytes long, so that waiters need not read it again (see
// Cache.storedBy); else it is "v". KEYS: value, lock, channel. ARGV: token,
// value, ttl ms, PUBLISH or SPUBLISH, longest value to publish.
var storeScript = redis.NewScript(storeLua + `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
return store(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
`)

// expiryLua gives a value key its TTL. A version 3 entry (see internal/entry)
// carries its expiry: the key expires at an instant read from the
// server's TIME (PXAT, PEXPIREAT), and the same instant is written into the
// entry (8 big-endian bytes of unix ms), so that the two agree exactly. (A
// relative PX would not: from Redis 7.2 a script's commands date it from
// the script's start, which a large value's copy puts well before TIME.)
// Other entries keep a relative TTL. setv stores v under vk for ttl ms;
// shorten cuts the TTL of the value under vk to ttl ms.
const expiryLua = `
local function deadline(head, ttl)
  if type(head) ~= 'string' or string.sub(head, 1, 3) ~= 'dp\3' then return nil end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ttl)
end
local function stamp(vk, at)
  local s = ''
  for i = 1, 8 do
    s = string.char(at % 256) .. s
    at = math.floor(at / 256)
  end
  redis.call('SETRANGE', vk, 3, s)
end
local function setv(vk, v, ttl)
  local at = deadline(v, ttl)
  if not at then
    redis.call('SET', vk, v, 'PX', ttl)
    return
  end
  redis.call('SET', vk, v, 'PXAT', at)
  stamp(vk, at)
end
local function shorten(vk, ttl)
  local at = deadline(redis.pcall('GETRANGE', vk, 0, 2), ttl)
  if not at then
    redis.call('PEXPIRE', vk, ttl)
    return
  end
  redis.call('PEXPIREAT', vk, at)
  stamp(vk, at)
end
`

// storeLua is storeScript's step, shared with storeTaggedScript; the lock
// was checked.
const storeLua = expiryLua + `
local function store(vk, lk, ch, token, v, ttl, pub, maxwake)
  if ttl ~= '0' then setv(vk, v, ttl) end
  redis.call('DEL', lk)
  local m = '` + wake.Stored + `'
  if #v <= tonumber(maxwake) then m = m .. token .. ':' .. v end
  redis.call(pub, ch, m)
  return 1
end
`

// failScript releases the lock after a failed compute, records the error
// text under our token for waiters (for ARGV[3] ms) and wakes them, if the
// lock still holds our token. With ARGV[5] > 0 it also sets the throttle
// key for that many ms, so that no process refreshes the value in the
// background again before then; with ARGV[6] = "drop" it deletes the value
// (compute found that it no longer exists). KEYS: lock, errs, channel,
// throttle, value. ARGV: token, text, marker ttl ms, PUBLISH or SPUBLISH,
// throttle ms, "drop" or "".
var failScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[4], '1', 'PX', ARGV[5]) end
if ARGV[6] == 'drop' then redis.call('DEL', KEYS[5]) end
redis.call(ARGV[4], KEYS[3], '` + wake.Failed + `')
return 1
`)

// releaseScript deletes the lock if it holds our token and wakes waiters
// (one of them takes over). It undoes an acquire whose reply was lost.
// KEYS: lock, channel. ARGV: token, PUBLISH or SPUBLISH.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], KEYS[2], '` + wake.Released + `')
return 1
`)

// extendScript renews the lease of each lock in KEYS that holds our token
// and returns how many did; it never re-creates a lock that expired. One
// key for Fetch, the held keys of one slot for FetchMany. KEYS: locks.
// ARGV: token, lease ms.
var extendScript = redis.NewScript(`
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    n = n + 1
  end
end
return n
`)

// setScript stores a value given by the caller, takes the lock away from
// any compute in progress (its fenced store then fails) and wakes waiters,
// who read the new value. KEYS: value, lock, channel. ARGV: value, ttl ms,
// PUBLISH or SPUBLISH.
var setScript = redis.NewScript(expiryLua + `
setv(KEYS[1], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[2])
redis.call(ARGV[3], KEYS[3], '` + wake.Stored + `')
return 1
`)

// deleteScript deletes the value and takes the lock away from any compute
// in progress, and wakes waiters, so that one of them computes afresh.
// KEYS: value, lock, channel. ARGV: PUBLISH or SPUBLISH.
var deleteScript = redis.NewScript(`
redis.call('DEL', KEYS[1], KEYS[2])
redis.call(ARGV[1], KEYS[3], '` + wake.Deleted + `')
return 1
`)

// run runs script s on the Cache's client. The first time this Cache runs
// s, it sends the script's body (EVAL), which loads it on the server as it
// runs; after that it sends only its SHA (EVALSHA), and go-redis falls back
// to EVAL on a NOSCRIPT error (another cluster node, a restarted server). So
// the first miss on a fresh server costs one round trip, not two.
func (c *core[T]) run(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if _, loaded := c.loaded.LoadOrStore(s, true); !loaded {
		return s.Eval(ctx, c.client, keys, args...)
	}
	return s.Run(ctx, c.client, keys, args...)
}

// at returns res[i] as an E, or false.
func at[E any](res []any, i int) (E, bool) {
	var zero E
	if i >= len(res) {
		return zero, false
	}
	e, ok := res[i].(E)
	return e, ok
}

// rollback undoes, in the background, requests of this process whose
// replies were lost (a lock attempt, a store) with undo, releases of the
// token they may have left holding a lock: the way the lock package undoes
// its lost acquires too (see redisutil.Rollback). ctx's end means that no
// caller waits any more.
func (c *core[T]) rollback(ctx context.Context, undo ...scriptCall) {
	redisutil.Rollback(ctx, func(ctx context.Context) { c.runPipelined(ctx, undo) })
}

// release gives up the lock if it still holds token, and wakes waiters.
func (c *core[T]) release(ctx context.Context, ks keys, token string) {
	ctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	sc := releaseCall(ks, token, c.publish)
	_ = c.run(ctx, sc.s, sc.keys, sc.args...).Err()
}

// releaseCall is the script call of release.
func releaseCall(ks keys, token, publish string) scriptCall {
	return scriptCall{releaseScript, []string{ks.lock, ks.channel}, []any{token, publish}}
}
