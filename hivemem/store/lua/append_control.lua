-- An explicit episode close (`SessionState.append_control`) takes the session's next seq,
-- so the boundary stage meets it in order with the turns. It skips the embed stage: its
-- processed bit is set here. The entry is `EpisodeControl`.
-- KEYS: ids hash, processed bitmap, meta, the embedded stream.
-- ARGV: the seq field's name, then the entry's other three (name, value) pairs.
-- Returns the seq, -1 when there is no such session.
if not redis.call('HGET', KEYS[1], '#seq') then return -1 end
local seq = redis.call('HINCRBY', KEYS[1], '#seq', 1)
redis.call('SETBIT', KEYS[2], seq, 1)
redis.call('HINCRBY', KEYS[3], 'controls', 1)
redis.call('XADD', KEYS[4], '*', ARGV[1], seq, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
           ARGV[7])
return seq
