-- A shared function, the first file of the scripts that compare stream entry ids with a
-- forget's mark (`forget_mark`): `id_after(a, b)`, whether entry id `a` ('<ms>-<seq>')
-- comes after `b`. Both parts fit a Lua number exactly (ms since 1970 is about 2^41).
local function id_after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  if am ~= bm then return am > bm end
  return as > bs
end
