-- The embed stage's skip for a turn it dead-lettered (`TurnLog.publish_skip`): the turn's dead
-- bit, and a skip entry on the embedded stream so that the boundary stage's pointer moves
-- past its seq; nothing when the turn's turns-stream entry is at or before the session's
-- forget mark (`forget_mark`: read before a forget of the session began, whose pointer is
-- gone: a skip would wait in a new buffer for good).
-- KEYS: the session's dead bitmap, the embedded stream, the session's forget mark.
-- ARGV: the seq, the turns-stream entry id ('': not checked), the mark's turns field, then
-- the skip entry's (field, value) pairs.
-- Returns 1 when published, 0 when the session was forgotten since.
local mark = ARGV[2] ~= '' and redis.call('HGET', KEYS[3], ARGV[3])
if mark and not id_after(ARGV[2], mark) then return 0 end
redis.call('SETBIT', KEYS[1], ARGV[1], 1)
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
return 1
