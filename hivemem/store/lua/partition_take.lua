-- A partition's lease: take it if it is free, renew it if it is ours.
-- KEYS: the lease. ARGV: the worker's id, the lease ms.
-- Returns 1 when held by us now, else 0.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
