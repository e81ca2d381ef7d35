-- Look at one session of the partition's waiting set (`EpisodeStore.sweep_check`): the
-- boundary workers' sweep, for buffers that no lease will drain (the holder died, or an
-- outage fell between its begin and its commit, and no entry of the session comes again).
-- KEYS: state, buffer, lease, the partition's waiting set. ARGV: session id.
-- Entries the pointer has passed (a redelivery buffered after its commit) are dropped.
-- Returns 0 (the buffer is empty: the session leaves the set), 1 (a lease is held, or the
-- entry the pointer waits for is not in yet: nothing to do now), 2 (no lease and the next
-- entry is buffered: the caller advances the session).
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next_seq') or '1')
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  local seq = tonumber(f)
  if seq and seq < nxt then redis.call('HDEL', KEYS[2], f) end
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return 0
end
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
if redis.call('HEXISTS', KEYS[2], tostring(nxt)) == 1 then return 2 end
return 1
