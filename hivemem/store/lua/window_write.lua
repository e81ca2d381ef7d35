-- Rewrite a session's recent window from stored turns (restore, import): one entry per
-- seq, the given version replacing what the list holds for that seq, the newest `window`
-- kept.
-- KEYS: the list.
-- ARGV: the window, then (seq, JSON) pairs.
-- Returns the number of turns the window holds.
local window = tonumber(ARGV[1])
local by_seq = {}
local cur = redis.call('LRANGE', KEYS[1], 0, -1)
for i = 1, #cur, 2 do by_seq[tonumber(cur[i])] = cur[i + 1] end
for i = 2, #ARGV, 2 do by_seq[tonumber(ARGV[i])] = ARGV[i + 1] end
local seqs = {}
for seq in pairs(by_seq) do seqs[#seqs + 1] = seq end
table.sort(seqs)
local out = {}
for i = math.max(1, #seqs - window + 1), #seqs do
  out[#out + 1] = string.format('%d', seqs[i])
  out[#out + 1] = by_seq[seqs[i]]
end
redis.call('DEL', KEYS[1])
for i = 1, #out, 512 do
  redis.call('RPUSH', KEYS[1], unpack(out, i, math.min(i + 511, #out)))
end
return #out / 2
