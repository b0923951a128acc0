-- ident is a value's identity: the SHA1 of its entry without its expiry
-- (entry.SHA1 in Go), which a stale InvalidateTag stamps again without
-- making it another value.
local function ident(v)
  if #v >= 11 and string.sub(v, 1, 3) == 'dp\3' then v = string.sub(v, 1, 3) .. string.sub(v, 12) end
  return redis.sha1hex(v)
end
