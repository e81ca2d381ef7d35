-- A whole-session forget's mark (`ErasureStore.mark_forgotten`), written before its first
-- pass and kept after it: the last ids the session's partition's turns stream and embedded
-- stream had generated when the forget began. An entry at or before its stream's mark was
-- there when the forget began, so it is the forgotten session's: the stages drop it instead
-- of writing anything derived from it (`publish_embedded`, `boundary_begin`). Both ids are
-- read in this one script, so an entry published on the embedded stream after the mark is
-- of a turn after the turns mark. A mark only moves forward (a later forget of the session,
-- reused meanwhile). The boundary stage's lease and buffer go at once: a commit under a lease
-- taken before the mark writes nothing (its script checks the lease), and nothing buffered
-- before the mark is read again; the currency keeper's write checks that the mark has not
-- moved since its run was read (`slot_table_write`).
-- KEYS: the mark (hash), the turns stream, the embedded stream, the boundary lease, the
-- boundary buffer.
-- ARGV: the mark's two field names (turns, embedded), its time to live in ms (0: none).
-- Returns {turns mark, embedded mark}.
local function last_id(stream)
  local ok, info = pcall(redis.call, 'XINFO', 'STREAM', stream)
  if not ok then return '0-0' end  -- no stream yet
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then return info[i + 1] end
  end
  return '0-0'
end
local out = {}
for j = 1, 2 do
  local now = last_id(KEYS[j + 1])
  local old = redis.call('HGET', KEYS[1], ARGV[j])
  if old and not id_after(now, old) then now = old end
  out[j] = now
end
redis.call('HSET', KEYS[1], ARGV[1], out[1], ARGV[2], out[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('PERSIST', KEYS[1])
end
redis.call('DEL', KEYS[4], KEYS[5])
return out
