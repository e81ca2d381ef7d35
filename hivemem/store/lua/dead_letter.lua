-- Move an entry to its stream's dead letters (`StreamStore.dead_letter`): ack it, drop its
-- delivery error and append the dead letter. For an entry a worker held ('1'), the dead
-- letter is written only while the entry is still on its stream: one gone from it was
-- deleted by a forget (a trim takes only what every group has acked, and this group has
-- not), and what the worker still held of it must not come back after the forget.
-- KEYS: the stream, its dead letters, the group's delivery errors.
-- ARGV: the group, the entry id, '1' when held by a worker (else '0'), then the dead
-- letter's (field, value) pairs.
-- Returns 1 when the dead letter was written, 0 when the entry was gone.
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
if ARGV[3] == '1' and #redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2]) == 0 then
  return 0
end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
return 1
