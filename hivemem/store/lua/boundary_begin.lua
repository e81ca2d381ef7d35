-- The boundary stage's first step for a session (`EpisodeStore.begin`).
-- KEYS: state, buffer, lease, the partition's waiting set, the session's forget mark.
-- ARGV: token, lease ms, max run, session id, the mark's embedded field, then (field, seq,
-- entry id, JSON) quadruples, JSON '' when the caller has not sent it (the light call, see
-- `begin`), entry id '' when not known (not checked).
-- An entry handed in whose embedded-stream entry id is at or before the session's forget
-- mark (`forget_mark`) was read before a forget of the session began: it is dropped, never
-- buffered nor taken.
-- A session whose buffer receives an entry joins the waiting set (the sweep's index: a
-- buffer nobody's lease will drain is drained by the sweep).
-- The entries handed in that the run takes now are never written to the buffer (the caller
-- has them, and they are consumed in this advance); only the others are buffered, and a
-- light call that would have to buffer one returns {2} having written nothing: the caller
-- sends the JSON then. Returns {0} when another worker holds the lease or nothing is ready
-- (the lease is then neither taken nor kept), else {1, next_seq, closed_count, open, the
-- forget mark read ('': none), field1, json1 or '', field2, ...} for the ready run ('' = the
-- caller handed it in).
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next_seq') or '1')
local mark = redis.call('HGET', KEYS[5], ARGV[5])
local given = {}
for i = 6, #ARGV, 4 do
  local forgotten = mark and ARGV[i + 2] ~= '' and not id_after(ARGV[i + 2], mark)
  if tonumber(ARGV[i + 1]) >= nxt and not forgotten then given[ARGV[i]] = i end
end
local holder = redis.call('GET', KEYS[3])
local mine = (not holder) or holder == ARGV[1]
local run = {}
local taken = {}
if mine then
  local limit = tonumber(ARGV[3])
  local seq = nxt
  while limit > 0 do
    local f = tostring(seq)
    if given[f] then
      run[#run + 1] = f
      run[#run + 1] = ''
      taken[f] = true
    else
      local v = redis.call('HGET', KEYS[2], f)
      if not v then break end
      run[#run + 1] = f
      run[#run + 1] = v
    end
    seq = seq + 1
    limit = limit - 1
  end
end
for f, i in pairs(given) do
  if not taken[f] then
    if ARGV[i + 3] == '' then return {2} end
  end
end
local buffered = false
for f, i in pairs(given) do
  if not taken[f] then
    redis.call('HSET', KEYS[2], f, ARGV[i + 3])
    buffered = true
  end
end
if buffered then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[4], 'NX', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
             ARGV[4])
end
if not mine then return {0} end
if #run == 0 then
  if holder then redis.call('DEL', KEYS[3]) end
  return {0}
end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
local st = redis.call('HMGET', KEYS[1], 'closed_count', 'open')
local out = {1, nxt, st[1] or '0', st[2] or '', mark or ''}
for j = 1, #run do out[#out + 1] = run[j] end
return out
