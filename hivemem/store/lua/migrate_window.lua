-- A function for the ingest script: move the older sorted-set window (`old`) in front of
-- the list (`win`), oldest first, then drop it. LPUSH puts each argument at the head in
-- turn, so the newest old pair goes first and the oldest ends up at the head.
local function migrate_window(win, old, length)
  local rows = redis.call('ZRANGE', old, 0, -1, 'WITHSCORES')
  if #rows == 0 then return length end
  local pushed = {}
  for i = #rows - 1, 1, -2 do
    pushed[#pushed + 1] = rows[i]
    pushed[#pushed + 1] = rows[i + 1]
  end
  for i = 1, #pushed, 512 do
    length = redis.call('LPUSH', win, unpack(pushed, i, math.min(i + 511, #pushed)))
  end
  redis.call('DEL', old)
  return length
end
