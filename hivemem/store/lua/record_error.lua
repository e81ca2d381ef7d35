-- Record why a delivery of an entry failed (`StreamStore.record_error`), only while the entry
-- is still on its stream: an error may quote the entry, and one a forget deleted (a worker
-- still held it) is not quoted back after the forget.
-- KEYS: the stream, the group's delivery errors.
-- ARGV: the entry id, the error.
-- Returns 1 when recorded, 0 when the entry was gone.
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
