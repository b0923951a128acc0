-- expiry gives a value key its TTL. A version 3 entry (see internal/entry)
-- carries its expiry: the key expires at an instant read from the server's
-- TIME (PXAT, PEXPIREAT), and the same instant is written into the entry (8
-- big-endian bytes of unix ms), so that the two agree exactly. (A relative
-- PX would not: from Redis 7.2 a script's commands date it from the
-- script's start, which a large value's copy puts well before TIME.) Other
-- entries keep a relative TTL. setv stores v under vk for ttl ms; shorten
-- cuts the TTL of the value under vk to ttl ms.
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
