-- The key index's reset (`KeyIndexStore.reset`), after a forget of some of a session's
-- turns: every entry goes (the next read folds the turns that stay from the start), and the
-- epoch moves on, so that a reader that folded turns before the forget cannot write them.
-- KEYS: the index hash.
-- Returns the new epoch.
local epoch = redis.call('HINCRBY', KEYS[1], '#epoch', 1)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '#epoch', epoch)
return epoch
