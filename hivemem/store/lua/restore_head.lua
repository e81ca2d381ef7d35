-- restore_session's counter and owner: never moves a live counter backwards; the owner is
-- the first restored turn's unless the session has one. A session that gets its owner here
-- is added to that namespace's index (a session with one already is listed in its own).
-- KEYS: ids hash, the first turn's namespace's index of the session's partition.
-- ARGV: the restored turns' top seq, the first turn's namespace, the session id.
local c = tonumber(redis.call('HGET', KEYS[1], '#seq') or '0')
if c < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], '#seq', ARGV[1]) end
if redis.call('HSETNX', KEYS[1], '#ns', ARGV[2]) == 1 then
  redis.call('SADD', KEYS[2], ARGV[3])
end
return 0
