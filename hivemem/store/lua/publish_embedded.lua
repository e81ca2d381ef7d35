-- The embed stage's one write to Redis per partition and batch
-- (`SessionState.publish_embedded`), idempotent: set each turn's processed bit and publish
-- the turns whose bit was not set before on the partition's embedded stream, one
-- `EmbeddedTurns` entry per session. A retry after a crash or an outage between the Qdrant
-- write and this script publishes nothing twice. One BITFIELD per session sets its bits and
-- returns the old ones (BITFIELD numbers bits as SETBIT does); the entry's values come built
-- (Lua hashes every byte of every string it makes, so joining the turns here would cost
-- more than the rest of the script). A session whose turns are partly published already (a
-- redelivery batched with new turns) has the bits this call set put back, and the caller
-- publishes the rest on its own.
-- A session's turns whose oldest turns-stream entry is at or before the session's forget
-- mark (`forget_mark`) are not published and set no bit: they were read before a forget of
-- the session began (the caller drops them, and what it wrote of them, by the mark
-- returned).
-- KEYS: the embedded stream, then per session its processed bitmap and its forget mark.
-- ARGV: the entry's names and kind (`EmbeddedTurns.script_fields`), the mark's turns field,
-- then per session the entry's four values (`EmbeddedTurns.script_values`), its turn count
-- c, the oldest turns-stream entry id of its turns ('': not known, not checked) and its c
-- seqs.
-- Returns the number of turns published, then (session index, the c old bits) for each
-- partly published session and (minus the session index, the mark) for each forgotten one.
local published = 0
local out = {0}
local a = 8
for g = 2, #KEYS, 2 do
  local c = tonumber(ARGV[a + 4])
  local since = ARGV[a + 5]
  local first = a + 6
  local mark = since ~= '' and redis.call('HGET', KEYS[g + 1], ARGV[7])
  if mark and not id_after(since, mark) then
    out[#out + 1] = -(g / 2)
    out[#out + 1] = mark
  else
    local ops = {}
    for j = 0, c - 1 do
      ops[#ops + 1] = 'SET'
      ops[#ops + 1] = 'u1'
      ops[#ops + 1] = ARGV[first + j]
      ops[#ops + 1] = 1
    end
    local old = redis.call('BITFIELD', KEYS[g], unpack(ops))
    local ones = 0
    for j = 1, c do ones = ones + old[j] end
    if ones == 0 then
      redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2], ARGV[3], ARGV[a], ARGV[4],
                 ARGV[a + 1], ARGV[5], ARGV[a + 2], ARGV[6], ARGV[a + 3])
      published = published + c
    elseif ones < c then
      local undo = {}
      for j = 1, c do
        if old[j] == 0 then
          undo[#undo + 1] = 'SET'
          undo[#undo + 1] = 'u1'
          undo[#undo + 1] = ARGV[first + j - 1]
          undo[#undo + 1] = 0
        end
      end
      redis.call('BITFIELD', KEYS[g], unpack(undo))
      out[#out + 1] = g / 2
      for j = 1, c do out[#out + 1] = old[j] end
    end
  end
  a = first + c
end
out[1] = published
return out
