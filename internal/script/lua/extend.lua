-- extend renews the lease of each lock in KEYS that holds our token and
-- returns how many did; it never re-creates a lock that expired. One key
-- for Fetch, the held keys of one slot for FetchMany. KEYS: locks. ARGV:
-- token, lease ms.
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    n = n + 1
  end
end
return n
