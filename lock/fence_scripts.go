package lock

import (
	"strconv"
	"strings"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Fencing numbers. Each lock name has a counter, a string key that holds
// the last number drawn from it; a number is
//
//	max(last + 1, the server's clock in microseconds)
//
// so it is above every number the counter gave before, and never below the
// clock when it was drawn. A counter that a failover or a restart set back
// (its last increments had not reached the replica or the disk) therefore
// still draws numbers above the lost ones, however fast the failover: the
// lost numbers were at most the old master's clock when they were drawn
// (plus one per number drawn faster than one a microsecond, which scripts
// that run for microseconds each never do), and the new master's clock is
// past that, unless it is behind the old one's by more than the failover
// took. (A counter that merely restarted from the clock once it trailed it
// by a second, as before, repeated the numbers lost in a failover over
// within that second.) Numbers are microseconds since 1970, about 1.8e15
// now: they fit an int64, and a Lua number (a double) holds them exactly,
// until the year 2255.
//
// A draw reads the clock (TIME) and swaps the number in with SET ... GET,
// which returns the last one: the same two commands as INCR and TIME, with
// no third to store the clock. Only when the counter is new, ahead of the
// clock or not a number does settle run a command more.
//
// A counter expires keep ms (WithRetention) after it was created, so that
// per-request lock names do not fill Redis, and is then created anew by
// the next acquisition (KEEPTTL: a draw leaves its TTL as it was). A new
// counter's number is the clock too, so numbers increase across the reset
// unless the server's clock went back meanwhile.

// fenceLib defines nextfence(key, keep), which draws a number from the
// counter key, kept keep ms.
const fenceLib = `
-- digits formats a fence: Lua's own number to string gives 1.79e+15.
local function digits(n) return string.format('%d', n) end
-- settle ends a draw: SET ... GET swapped us, the clock, into the
-- counter key, which held old. It returns the number drawn.
local function settle(key, keep, us, old)
  local last = tonumber(old)
  if last and last < us then
    -- A counter whose last number is older than the retention would have
    -- expired: it has no TTL, made before counters had one.
    if last + keep * 1000 < us then redis.call('PEXPIRE', key, keep) end
    return us
  end
  if not old then -- new
    redis.call('PEXPIRE', key, keep)
    return us
  end
  if not last then -- another program's data: put it back, and fail
    redis.call('SET', key, old, 'KEEPTTL')
    error({err = 'WRONGTYPE fencing counter ' .. key .. ' holds no number'})
  end
  redis.call('SET', key, digits(last + 1), 'KEEPTTL') -- ahead of the clock
  return last + 1
end
local function nextfence(key, keep)
  local t = redis.call('TIME')
  local us = t[1] * 1000000 + t[2] -- TIME's strings, as numbers
  return settle(key, keep, us, redis.call('SET', key, digits(us), 'KEEPTTL', 'GET'))
end
` + oursLib

// mutexAcquireHead is mutexAcquire's common call (see there): a fence
// drawn as nextfence draws it, and the lock if it is free. It settles its
// draw only in the common case, a counter behind the clock and younger
// than the default retention; otherwise it leaves the number, us, and
// what the counter held, old, to the rest of the script.
var mutexAcquireHead = strings.ReplaceAll(`
local us, old
if not ARGV[3] then
  local t = redis.call('TIME')
  us = t[1] * 1000000 + t[2] -- TIME's strings, as numbers
  old = redis.call('SET', KEYS[2], string.format('%d', us), 'KEEPTTL', 'GET')
  local last = tonumber(old)
  if last and last < us and last + $KEEPUS >= us and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return us end
end
`, "$KEEPUS", strconv.FormatInt(DefaultRetention.Microseconds(), 10))

// mutexFence is where mutexAcquire's rest draws its number: fence()
// settles the head's draw, if the head made one, and returns it once;
// else it draws anew. A foreign counter fails here, before the rest
// writes anything.
var mutexFence = strings.ReplaceAll(`
local keep = ARGV[5] or '$RETENTION'
local drawn = us and settle(KEYS[2], keep, us, old)
local function fence()
  local f = drawn
  drawn = nil
  return f or nextfence(KEYS[2], keep)
end
`, "$RETENTION", strconv.FormatInt(redisutil.Millis(DefaultRetention), 10))
