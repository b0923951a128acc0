package lock

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A plain mutex is one string key with the lease's TTL, "token:", as
// lean as a lock can be: an uncontended Lock+Unlock costs Redis a TIME
// and a SET ... GET (the fence, see fence_scripts.go) and a SET NX PX,
// then a GET and a DEL. The fence is not in the value: the caller keeps
// it, and the release needs only the token.
// A "+" appended to the value marks that someone waits for the lock, so
// the release publishes a wake-up only then. A fair holder (WithFair)
// sets the same key ("token:fence"), so a plain acquirer needs no second
// look to find the lock busy.
//
// Hand-off: a waiter's first attempt draws a number from the fencing
// counter, and the waiter keeps it as its ticket. Waiters mark the lock with the smallest ticket among them
// ("token:+ticket"). The release of a lock so marked does not free it but
// reserves it for that ticket for a short grace ("~ticket", PX grace) and
// wakes the waiters: only a waiter holding that ticket (or an older one)
// may take it. So the releaser, which would otherwise win every race by
// one round trip, and waiters that came later queue behind the longest
// waiter, across processes, at the cost of a key and a number per waiter.
// If that waiter is gone, the reservation lapses after the grace.

// oursLib tells whether a lock's value v is held by token tok. Scripts
// that mint no fence take only this: every function a script defines is
// built anew on every call.
const oursLib = `
local function ours(v, tok)
  return type(v) == 'string' and string.sub(v, 1, #tok + 1) == tok .. ':'
end
`

// mutexAcquire takes the lock if it is free, or reserved for the caller's
// ticket or a later one, returning a new fence; if the lock is already
// ours (a retried request whose first reply was lost: go-redis retries on
// network errors), it returns a new fence too, larger than the one the
// lost reply carried. Otherwise it marks the lock with the caller's
// ticket, unless an older one marks it, and returns {-1 - the holder's
// PTTL, the caller's ticket}; or 0 for a key without TTL, which no lock of
// ours ever is (foreign data). Fences increase, with gaps: tickets are
// drawn from the same counter. The fence is drawn before the lock is set,
// so that a counter holding foreign data fails the script before it takes
// anything (the caller then has nothing to roll back).
// KEYS: lock, fence counter. ARGV: "token:", ttl ms[, ticket (0 for a
// first attempt, -1 for one that will not wait: it neither marks nor takes
// a reserved lock), mark ("+" when more waiters of this process wait, else
// ""), retention ms].
//
// The common call, a first attempt with no mark and the default retention,
// sends only the value and the TTL, and is over in the script's first
// lines: every argument, every global the script reads (ARGV, redis,
// string), every statement it runs and every function it defines costs
// the server about a thousand instructions, so the rest of the script,
// and fenceLib's functions, come only after it. (A value with the fence
// in it, "token:fence", cost the common call a string.format and two
// concatenations: 8 % of the server's instructions per Lock+Unlock.) A
// counter that is new, ahead of the clock, older than the retention or
// foreign goes on to the rest, which settles the head's draw.
//
// A waiter's retry (ticket > 0) looks before it draws a number: most
// retries find the lock taken by the waiter it was reserved for, and then
// cost neither a fence nor a failed SET.
var mutexAcquire = redis.NewScript(mutexAcquireHead + fenceLib + mutexFence + `
local ticket = tonumber(ARGV[3] or 0)
local value = ARGV[1] .. (ARGV[4] or '')
local v = redis.call('GET', KEYS[1])
if v and ticket > 0 and string.sub(v, 1, 1) == '~' and ticket <= (tonumber(string.sub(v, 2)) or 0) then
  v = false -- reserved for us, or for a later ticket
end
if not v then
  local f = fence()
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  return f
end
if string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  local f = fence()
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return f
end
local t = redis.call('PTTL', KEYS[1])
if t < 0 then return 0 end
if ticket < 0 then return {-1 - t, 0} end
if ticket == 0 then ticket = fence() end
if string.sub(v, 1, 1) == '~' then return {-1 - t, ticket} end
local plus = string.find(v, '+', 1, true)
local oldest = plus and tonumber(string.sub(v, plus + 1))
if not oldest or ticket < oldest then
  local held = plus and string.sub(v, 1, plus - 1) or v
  redis.call('SET', KEYS[1], held .. '+' .. digits(ticket), 'KEEPTTL', 'XX')
end
return {-1 - t, ticket}
`)

// mutexRelease frees the lock if it holds our token, or reserves it for
// the oldest waiting ticket, and, if someone waits, wakes one waiter per
// process (payload "1", see wake.One) on the lock's channel, KEYS[1]..":wake"
// (a channel, not a key: it shares the lock's hash tag, so its cluster
// slot). ARGV[1] is "token:", the lock's value as our acquire set it: the
// common case, a lock nobody marked, is one comparison and a DEL; a value
// with a waiter's mark after it is ours too, and so is a value with a
// fence after the colon (a MultiMutex's, or one an earlier version set).
// Each argument costs the server about as much as a Lua statement or two,
// so there is one, and the publish command and the grace are written into
// the script: one script per publish command (see releaseScript).
// KEYS: lock. ARGV: "token:".
const mutexReleaseText = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if not v or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then return 0 end
` + releaseLib + `
release(KEYS[1], KEYS[1] .. ':wake', v, '$PUBLISH', $GRACE)
return 1
`

// mutexRelease holds mutexReleaseText for PUBLISH and for SPUBLISH.
var mutexRelease = map[string]*redis.Script{
	"PUBLISH":  releaseScript("PUBLISH"),
	"SPUBLISH": releaseScript("SPUBLISH"),
}

func releaseScript(publish string) *redis.Script {
	return redis.NewScript(strings.NewReplacer("$PUBLISH", publish,
		"$GRACE", strconv.FormatInt(redisutil.Millis(handoffGrace), 10)).Replace(mutexReleaseText))
}

// releaseLib frees a lock whose value v we hold: reserved for the oldest
// ticket that marked it, deleted otherwise; waiters are woken if any.
const releaseLib = `
local function release(key, channel, v, pub, grace)
  local plus = string.find(v, '+', 1, true)
  if not plus then
    redis.call('DEL', key)
    return
  end
  local ticket = string.sub(v, plus + 1)
  if ticket == '' then
    redis.call('DEL', key)
  else
    redis.call('SET', key, '~' .. ticket, 'PX', grace)
  end
  redis.call(pub, channel, '` + wake.One + `')
end
`

// mutexWithdraw takes back the claim of a waiter that gave up, ticket
// ARGV[1]: the mark of its ticket on the held lock (the "+" stays: other
// waiters may wait, and the release must wake them), or the reservation a
// release made for it, which it frees, waking the others. KEYS: lock.
const mutexWithdrawText = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v == '~' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('$PUBLISH', KEYS[1] .. ':wake', '` + wake.One + `')
  return 1
end
local plus = string.find(v, '+', 1, true)
if plus and string.sub(v, plus + 1) == ARGV[1] then
  redis.call('SET', KEYS[1], string.sub(v, 1, plus), 'KEEPTTL', 'XX')
  return 1
end
return 0
`

// mutexWithdraw holds mutexWithdrawText for PUBLISH and for SPUBLISH.
var mutexWithdraw = map[string]*redis.Script{
	"PUBLISH":  redis.NewScript(strings.ReplaceAll(mutexWithdrawText, "$PUBLISH", "PUBLISH")),
	"SPUBLISH": redis.NewScript(strings.ReplaceAll(mutexWithdrawText, "$PUBLISH", "SPUBLISH")),
}

// mutexExtend resets the TTL if the lock holds our token; it never
// re-creates a lock that expired. KEYS: lock. ARGV: token, ttl ms.
var mutexExtend = redis.NewScript(oursLib + `
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// mutexPTTL returns the lock's PTTL if it holds our token, else -3.
// KEYS: lock. ARGV: token.
var mutexPTTL = redis.NewScript(oursLib + `
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return -3 end
return redis.call('PTTL', KEYS[1])
`)

// A MultiMutex locks the keys of several plain mutexes at once (KEYS in
// pairs: lock, fence counter), so it excludes a Mutex of any of its names.
// Keys of one script must share a cluster slot; the Go side groups names
// by slot.

// multiAcquire takes every lock if all are free or already ours (a retried
// request), returning {1, fence...} in KEYS order; otherwise it changes
// nothing but the busy lock's waiter mark and returns {0, index of a busy
// name (from 1), its PTTL}, or {-1, index} for a key that holds foreign
// data. KEYS: (lock, fence)... ARGV: token, ttl ms, retention ms.
var multiAcquire = redis.NewScript(fenceLib + `
local vals = {}
for i = 1, #KEYS, 2 do
  local v = redis.call('GET', KEYS[i])
  if v and not ours(v, ARGV[1]) then
    local t = redis.call('PTTL', KEYS[i])
    if t < 0 then return {-1, (i+1)/2} end
    if not string.find(v, '[~+]') then redis.call('APPEND', KEYS[i], '+') end
    return {0, (i+1)/2, t}
  end
  vals[i] = v
end
local out = {1}
for i = 1, #KEYS, 2 do
  local f
  if vals[i] then
    f = tonumber(string.match(vals[i], ':(%d+)'))
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  else
    f = nextfence(KEYS[i+1], ARGV[3])
    redis.call('SET', KEYS[i], ARGV[1] .. ':' .. digits(f), 'PX', ARGV[2])
  end
  out[#out+1] = f
end
return out
`)

// multiRelease releases each lock that holds our token as mutexRelease
// does; it returns how many it released. A key that holds foreign data is
// not ours (pcall: it must not stop the others). KEYS: (lock, wake
// channel)... ARGV: token, PUBLISH or SPUBLISH, grace ms.
var multiRelease = redis.NewScript(oursLib + releaseLib + `
local n = 0
for i = 1, #KEYS, 2 do
  local v = redis.pcall('GET', KEYS[i])
  if ours(v, ARGV[1]) then
    release(KEYS[i], KEYS[i+1], v, ARGV[2], ARGV[3])
    n = n + 1
  end
end
return n
`)

// multiExtend resets every lock's TTL if all still hold our token, else
// changes nothing and returns 0. KEYS: locks. ARGV: token, ttl ms.
var multiExtend = redis.NewScript(oursLib + `
for i = 1, #KEYS do
  if not ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then return 0 end
end
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
return 1
`)

// multiPTTL returns the smallest PTTL of the locks if all hold our token,
// else -3. KEYS: locks. ARGV: token.
var multiPTTL = redis.NewScript(oursLib + `
local least = -3
for i = 1, #KEYS do
  if not ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then return -3 end
  local t = redis.call('PTTL', KEYS[i])
  if least == -3 or t < least then least = t end
end
return least
`)
