-- The boundary stage's second step for a session (`EpisodeStore.commit`): apply one
-- advance atomically, only if this worker still holds the lease.
-- KEYS: state, buffer, lease, episode list, outbox, the partition's waiting set, then one
-- key per closed episode.
-- ARGV: token, lease ms, next_seq, closed_count, open, session id, the outbox's three field
-- names, marker count m, m (name, n) pairs, count c and the c consumed fields that were
-- read from the buffer (to drop them; the ones handed in were never written), then per
-- episode (id, index, body).
-- Returns -1 (lease lost, nothing written), 1 (more is ready, lease kept), 0 (done, lease
-- released).
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[1], 'next_seq', ARGV[3], 'closed_count', ARGV[4], 'open', ARGV[5])
local a = 10
local m = tonumber(ARGV[a])
for i = 1, m do
  redis.call('HINCRBY', KEYS[1], 'marker:' .. ARGV[a + 2 * i - 1], ARGV[a + 2 * i])
end
a = a + 2 * m + 1
local c = tonumber(ARGV[a])
if c > 0 then redis.call('HDEL', KEYS[2], unpack(ARGV, a + 1, a + c)) end
a = a + c + 1
for k = 7, #KEYS do
  redis.call('SET', KEYS[k], ARGV[a + 2])
  redis.call('RPUSH', KEYS[4], ARGV[a])
  redis.call('XADD', KEYS[5], '*', ARGV[7], ARGV[a], ARGV[8], ARGV[6], ARGV[9], ARGV[a + 1])
  a = a + 3
end
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return 1
end
redis.call('DEL', KEYS[3])
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('ZREM', KEYS[6], ARGV[6]) end
return 0
