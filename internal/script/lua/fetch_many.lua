-- fetch_many is FetchMany's first lock attempt for the missing keys of one
-- cluster slot: look for each, with one token for all. It returns look's
-- reply per key, in order. KEYS: value, lock, errs of each key. ARGV:
-- token, lease ms, then per key the SHA1 of a value to treat as absent or "".
--@ look
local out = {}
for i = 1, #KEYS / 3 do
  out[i] = look(KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i], ARGV[1], ARGV[2], '', ARGV[2+i], '')
end
return out
