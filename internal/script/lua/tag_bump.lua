-- tag_bump bumps a tag's epoch and moves its set aside, in one step, before
-- InvalidateTag voids the values of the set: a value tagged after this
-- step goes into a new set, and a compute that tagged before it finds the
-- epoch moved. The set aside joins the tag's registry of sets aside, which
-- it returns (the new one among them, if the tag had a set). KEYS: epoch,
-- set, registry, the set's new name. ARGV: how long the epoch and the
-- registry live at least (as long as its longest set aside), ms.
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[4])
  redis.call('SADD', KEYS[3], KEYS[4])
  local life = math.max(tonumber(ARGV[1]), redis.call('PTTL', KEYS[4]))
  if redis.call('PTTL', KEYS[3]) < life then redis.call('PEXPIRE', KEYS[3], life) end
end
return redis.call('SMEMBERS', KEYS[3])
