-- tagadd adds value key vk, stored for ttl ms, to the set of a tag, and
-- makes the set live at least as long.
local function tagadd(set, vk, ttl)
  redis.call('SADD', set, vk)
  local p = redis.call('PTTL', set)
  if p < tonumber(ttl) then redis.call('PEXPIRE', set, ttl) end
end
