-- Append audit events in order; seq continues from the stream's length (it is never
-- trimmed).
-- KEYS: the session's audit stream.
-- ARGV: the entry's two field names (`AuditEntry`), then one body per event.
-- Returns the last seq.
local n = redis.call('XLEN', KEYS[1])
for i = 3, #ARGV do
  n = n + 1
  redis.call('XADD', KEYS[1], '*', ARGV[1], n, ARGV[2], ARGV[i])
end
return n
