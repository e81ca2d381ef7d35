-- restore_session's counter and owner: never moves a live counter backwards; the owner is
-- the first restored turn's unless the session has one.
-- KEYS: ids hash.
-- ARGV: the restored turns' top seq, the first turn's namespace.
local c = tonumber(redis.call('HGET', KEYS[1], '#seq') or '0')
if c < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], '#seq', ARGV[1]) end
redis.call('HSETNX', KEYS[1], '#ns', ARGV[2])
return 0
