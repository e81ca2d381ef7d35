-- The keeper's write of a session's slot table (`SlotTableStore.write`), conditional: it
-- changes nothing unless the stored `applied` seq is still the one the keeper read, so a
-- replay, or a worker whose lease expired, never applies a turn twice; nor past the session's
-- counter: a run read before a forget purged the session (the counter went with it) would
-- otherwise write the forgotten turns' text back into a fresh state.
-- The state's `epoch` is set by its first write and kept by the rest: (applied, epoch) names
-- one state for good (a purge deletes it, so a session started again gets another epoch),
-- which lets a keeper keep the state it wrote instead of parsing it again next time.
-- Given the session's forget mark as the keeper's run was read, the write changes nothing
-- once the mark has moved (`forget_mark`: a forget of the session began since; the counter
-- alone would not tell once the session, used again, has as many turns).
-- KEYS: the state hash, the table hash, the session's ids hash (its counter, `#seq`), the
-- session's forget mark.
-- ARGV: the applied seq read, the new one, the state JSON (without the vectors), an epoch
-- for a state that has none yet, p, d, the epoch of the state whose vector fields the
-- caller knows ('': it knows none), '=' and the mark read ('': not checked), the mark's
-- field; then p (field, vector) pairs for the state hash (a
-- current statement's turn vector, `v:<turn id>`), d such fields to delete (no longer
-- current), and when the caller knows none every other vector field is deleted; then
-- (field, value) pairs for the table (an empty value deletes the field: a statement
-- current again).
-- Reply: the state's epoch when written, 0 when another writer moved `applied` since the
-- read, -1 when the session was never given the seq or its forget mark moved (forgotten
-- since the run was read),
-- -2 when the stored state is not the one whose fields the caller knows (nothing written:
-- send every vector).
if ARGV[8] ~= '' and '=' .. (redis.call('HGET', KEYS[4], ARGV[9]) or '') ~= ARGV[8] then
  return -1
end
local applied = tonumber(redis.call('HGET', KEYS[1], 'applied') or '0')
if applied ~= tonumber(ARGV[1]) then return 0 end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[3], '#seq') or '0') then return -1 end
local epoch = redis.call('HGET', KEYS[1], 'epoch')
local put, drop, prune = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == ''
if not prune and epoch ~= ARGV[7] then return -2 end
if not epoch then epoch = ARGV[4] end
local i = 10
if prune then
  local wanted = {}
  for j = i, i + 2 * put - 1, 2 do wanted[ARGV[j]] = true end
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 2) == 'v:' and not wanted[f] then redis.call('HDEL', KEYS[1], f) end
  end
end
redis.call('HSET', KEYS[1], 'applied', ARGV[2], 'state', ARGV[3], 'epoch', epoch)
for j = 1, put do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = 1, drop do
  redis.call('HDEL', KEYS[1], ARGV[i])
  i = i + 1
end
for j = i, #ARGV, 2 do
  if ARGV[j + 1] == '' then redis.call('HDEL', KEYS[2], ARGV[j])
  else redis.call('HSET', KEYS[2], ARGV[j], ARGV[j + 1]) end
end
return epoch
