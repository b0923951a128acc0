-- look is the miss path's step for one key, GET-or-lock, shared by
-- fetch.lua and fetch_many.lua. It returns {0, value} if the value is
-- present (and is not the undecodable value whose SHA1 is bad); {1} if the
-- caller now holds the compute lock (also for a retried request that
-- already took it); {2, holder, pttl} if another holder computes; {3, text}
-- if the compute of holder seen, which the caller waited for, failed with
-- that error text. With force = "force" (Refresh) a present value is passed
-- over unless the holder the caller waited for (seen) is gone: then the
-- value is that holder's result; the lock's reply then carries the value
-- passed over, {1, value}, which compute may ask for (dogpile.Previous). So that a holder that failed or died is
-- not taken for one that stored, a Refresh's busy reply carries the SHA1 of
-- the value it passed over, {2, holder, pttl, sha1}, which the caller then
-- gives as bad: that value is never the result of the compute it awaited.
-- A value key of another type (see notString) reads as none: SET replaces it.
--@ ident
local function locked(v, force)
  if v and force ~= '' then return {1, v} end
  return {1}
end
local function look(vk, lk, ek, token, lease, seen, bad, force)
  local v = redis.pcall('GET', vk)
  if type(v) ~= 'string' then v = false end
  local h = redis.call('GET', lk)
  local take = force == '' or (seen ~= '' and h ~= seen)
  if v and take and (bad == '' or ident(v) ~= bad) then return {0, v} end
  if h == token then return locked(v, force) end
  if h and v and force ~= '' then return {2, h, redis.call('PTTL', lk), ident(v)} end
  if h then return {2, h, redis.call('PTTL', lk)} end
  if seen ~= '' then
    local e = redis.call('HGET', ek, seen)
    if e then return {3, e} end
  end
  redis.call('SET', lk, token, 'PX', lease)
  return locked(v, force)
end
