-- The key index's write (`KeyIndexStore.write`): entries folded by a reader, written only
-- when the index is still where that reader found it (the same epoch: no forget reset it
-- meanwhile; the same watermark: no other reader moved it), so a reader that lost a race,
-- or read turns a forget has since erased, writes nothing.
-- KEYS: the index hash.
-- ARGV: the epoch read ('0': none), the watermark's field, the watermark read, the new
-- watermark, then field/value pairs.
-- Returns 1 when written, 0 when the index had moved.
local epoch = redis.call('HGET', KEYS[1], '#epoch') or '0'
if epoch ~= ARGV[1] then return 0 end
local upto = redis.call('HGET', KEYS[1], ARGV[2]) or '0'
if upto ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
for i = 5, #ARGV, 512 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 511, #ARGV)))
end
return 1
