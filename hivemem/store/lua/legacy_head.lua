-- A function for the scripts that write a session: the counter and owner of a session
-- written before they moved into the ids hash (two strings), moved into it, the strings
-- dropped. Returns them (false for one that is not there).
local function legacy_head(ids, seq_key, ns_key)
  local old = redis.call('MGET', seq_key, ns_key)
  local fields = {}
  if old[1] then
    fields[#fields + 1] = '#seq'
    fields[#fields + 1] = old[1]
  end
  if old[2] then
    fields[#fields + 1] = '#ns'
    fields[#fields + 1] = old[2]
  end
  if #fields > 0 then
    redis.call('HSET', ids, unpack(fields))
    redis.call('DEL', seq_key, ns_key)
  end
  return old[1], old[2]
end
