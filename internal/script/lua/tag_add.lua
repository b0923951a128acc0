-- tag_add adds a value key to a tag's set, where the tag's keys live in
-- another slot than the value's (a Cluster, a Ring), and returns the tag's
-- epoch ("" for none) so that the caller can tell whether an InvalidateTag
-- came since compute tagged the value. KEYS: set, epoch. ARGV: value key,
-- its ttl ms.
--@ tag_step
tagadd(KEYS[1], ARGV[1], ARGV[2])
return redis.call('GET', KEYS[2]) or ''
