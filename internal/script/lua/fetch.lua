-- fetch is the miss path's one round trip for one key: look.
-- KEYS: value, lock, errs. ARGV: token, lease ms[, awaited holder or "",
-- SHA1 of a value to treat as absent or "", "force" or ""].
--
-- The common call, a Fetch's first look (no holder awaited, no value to pass
-- over), sends the first two arguments only and is over in the script's
-- first lines, look's for that case: the functions that follow are built
-- anew on every call, which costs the server more than those lines do.
if not ARGV[3] then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' then return {0, v} end
  local h = redis.call('GET', KEYS[2])
  if h and h ~= ARGV[1] then return {2, h, redis.call('PTTL', KEYS[2])} end
  if not h then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
  return {1}
end
--@ look
return look(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
