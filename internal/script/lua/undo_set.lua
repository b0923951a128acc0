-- undo_set deletes the value a Set stored, if it is still there: a
-- SetTagged whose tag step failed undoes its value, but not a later
-- writer's (whose store it would turn into a miss). The lock and the
-- waiters are left alone: the Set took the lock already, and a later
-- holder's is not ours to take. KEYS: value. ARGV: the entry the Set sent.
--@ ident
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or ident(v) ~= ident(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
