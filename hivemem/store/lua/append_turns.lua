-- The ingest script (`SessionState.append_turns`): one atomic step per turn, for a batch of
-- turns of one partition (every key in one slot). A session belongs to the namespace of its
-- first turn (a turn of another namespace gets -1, nothing written; sessions from before
-- namespaces are "default"); a repeated turn id returns the seq it already had; otherwise
-- the next seq is taken and the turn is appended to the partition's turns stream and to the
-- recent window.
-- The caller groups the turns by (session, namespace), groups in the order of their first
-- turn: only one group of a session can match its owner, so this refuses and appends what
-- turn-by-turn order would, and per-session order is kept inside each group. Per group the
-- script reads the counter, the owner and every turn id from the ids hash (one HMGET: they
-- share it, `hivemem.store.head`), XADDs each new turn, then writes the counter and the ids (one HSET) and the window once:
-- three or four commands per session and call, one per turn. A session is listed and its
-- first activity set by its first turn only; its last activity is its newest turn's
-- timestamp, which the window's last entry holds (`window.activity`), so the meta hash gets
-- it only when there is no window.
-- The window is a list of (seq, JSON) pairs (`hivemem.store.window`): one RPUSH, and an
-- LTRIM once it holds `slack` turns too many. Each seq is made text once (Lua formats
-- numbers with sprintf).
-- A session that gets its owner here is added to its namespace's index of the partition
-- (`Keys.namespace_sessions`: what a namespace's listing reads).
-- KEYS: the stream, the partition's session set, then 4 keys per group (ids, window, meta,
-- the group's namespace index).
-- ARGV: the window, the entry's two field names (from `TurnEntry`), the group count g, the
-- slack, then per group: the session's internal name (`Keys.session_name`: what the
-- partition's session set lists), its session id (what its namespace's index lists),
-- namespace, turn count c and c (turn id, wire JSON, timestamp) triples.
-- Returns seq, duplicate per turn, group by group, flattened.
local window = tonumber(ARGV[1])
local slack = tonumber(ARGV[5])
local out = {}
local function chunked(cmd, key, list)
  for i = 1, #list, 512 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 511, #list)))
  end
end
local a = 6
for g = 1, tonumber(ARGV[4]) do
  local k = 2 + (g - 1) * 4
  local name, sid, ns, c = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  a = a + 4
  local ids_key = KEYS[k + 1]
  local found = {}
  local seq_raw, owner
  for i = 0, c - 1, 512 do
    local fields = {}
    if i == 0 then fields = {'#seq', '#ns'} end
    for j = i, math.min(i + 511, c - 1) do fields[#fields + 1] = ARGV[a + 3 * j] end
    local got = redis.call('HMGET', ids_key, unpack(fields))
    local from = 1
    if i == 0 then
      seq_raw, owner = got[1], got[2]
      from = 3
    end
    for x = from, #got do found[#found + 1] = got[x] end
  end
  local seq = tonumber(seq_raw or '0')
  local claim = false
  if not owner then
    if seq > 0 then owner = 'default' end
    if not owner or owner == ns then
      owner = ns
      claim = true
    end
  end
  if owner ~= ns then
    for _ = 1, c do
      out[#out + 1] = -1
      out[#out + 1] = 0
    end
  else
    local known, ids, recent = {}, {}, {}
    local first, last
    for j = 1, c do
      local b = a + 3 * (j - 1)
      local tid = ARGV[b]
      local existing = known[tid] or found[j]
      if existing then
        out[#out + 1] = tonumber(existing)
        out[#out + 1] = 1
      else
        seq = seq + 1
        local text = string.format('%d', seq)
        known[tid] = text
        ids[#ids + 1] = tid
        ids[#ids + 1] = text
        redis.call('XADD', KEYS[1], '*', ARGV[2], text, ARGV[3], ARGV[b + 1])
        if window > 0 then
          recent[#recent + 1] = text
          recent[#recent + 1] = ARGV[b + 1]
        end
        if seq == 1 then
          first = ARGV[b + 2]
          redis.call('SADD', KEYS[2], name)
        end
        last = ARGV[b + 2]
        out[#out + 1] = seq
        out[#out + 1] = 0
      end
    end
    if #ids > 0 or claim then
      local fields = {}
      if #ids > 0 then fields = {'#seq', string.format('%d', seq)} end
      if claim then
        fields[#fields + 1] = '#ns'
        fields[#fields + 1] = owner
      end
      for _, v in ipairs(ids) do fields[#fields + 1] = v end
      chunked('HSET', ids_key, fields)
      if claim then redis.call('SADD', KEYS[k + 4], sid) end
    end
    if #ids > 0 then
      if window > 0 then
        local length = 0
        for i = 1, #recent, 512 do
          length = redis.call('RPUSH', KEYS[k + 2], unpack(recent, i, math.min(i + 511, #recent)))
        end
        if length > 2 * (window + slack) then
          redis.call('LTRIM', KEYS[k + 2], -2 * window, -1)
        end
      end
      if first then
        redis.call('HSET', KEYS[k + 3], 'first_ts', first, 'last_ts', last)
      elseif window == 0 then
        redis.call('HSET', KEYS[k + 3], 'last_ts', last)
      end
    end
  end
  a = a + 3 * c
end
return out
