-- restore_session's counter and owner: never moves a live counter backwards; the owner is
-- the first restored turn's unless the session has one.
-- KEYS: ids hash, the older seq and ns strings.
-- ARGV: the restored turns' top seq, the first turn's namespace.
local got = redis.call('HMGET', KEYS[1], '#seq', '#ns')
if not got[1] and not got[2] then legacy_head(KEYS[1], KEYS[2], KEYS[3]) end
local c = tonumber(redis.call('HGET', KEYS[1], '#seq') or '0')
if c < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], '#seq', ARGV[1]) end
redis.call('HSETNX', KEYS[1], '#ns', ARGV[2])
return 0
