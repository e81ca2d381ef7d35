-- The keeper's write of a session's slot table (`SlotTableStore.write`), conditional: it
-- changes nothing unless the stored `applied` seq is still the one the keeper read, so a
-- replay, or a worker whose lease expired, never applies a turn twice; nor past the session's
-- counter: a run read before a forget purged the session (the counter went with it) would
-- otherwise write the forgotten turns' text back into a fresh state.
-- The state's `epoch` is set by its first write and kept by the rest: (applied, epoch) names
-- one state for good (a purge deletes it, so a session started again gets another epoch),
-- which lets a keeper keep the state it wrote instead of parsing it again next time.
-- KEYS: the state hash, the table hash, the session's ids hash (its counter, `#seq`).
-- ARGV: the applied seq read, the new one, the state JSON, an epoch for a state that has
-- none yet, then (field, value) pairs for the table (an empty value deletes the field: a
-- statement current again).
-- Reply: the state's epoch when written, 0 when another writer moved `applied` since the
-- read, -1 when the session was never given the seq (forgotten since the run was read).
local applied = tonumber(redis.call('HGET', KEYS[1], 'applied') or '0')
if applied ~= tonumber(ARGV[1]) then return 0 end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[3], '#seq') or '0') then return -1 end
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then epoch = ARGV[4] end
redis.call('HSET', KEYS[1], 'applied', ARGV[2], 'state', ARGV[3], 'epoch', epoch)
for i = 5, #ARGV, 2 do
  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[2], ARGV[i])
  else redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
end
return epoch
