-- Advance a session's reflection pointer only while holding its lock, and never backwards.
-- KEYS: the lock, the pointer. ARGV: the holder's token, the new pointer.
-- Returns the new pointer, -1 when the lock is lost (nothing written).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > cur then redis.call('SET', KEYS[2], ARGV[2]) end
return tonumber(ARGV[2])
