-- Renew a lease, only if it is still ours (the reflection lock).
-- KEYS: the lease. ARGV: the holder's token, the lease ms.
-- Returns 1 when renewed, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
