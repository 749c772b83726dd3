-- open.lua - create the next POST stream (name '') or create / reopen the
-- standalone one (after token.lua). KEYS sess, streams. ARGV token(1-3),
-- 4 key prefix, 5 name. Returns n of r<n> (0 for "g").
if redis.call('EXISTS', KEYS[1]) == 0 then return {TIDEMARK_ENOTFOUND} end
local name, n = ARGV[5], 0
if name == '' then
  n = tonumber(redis.call('HGET', KEYS[1], 'next_r') or '1')
  redis.call('HSET', KEYS[1], 'next_r', n + 1)
  name = 'r' .. string.format('%d', n)
end
local meta = ARGV[4] .. 'm:' .. name
if redis.call('EXISTS', meta) == 1 then
  redis.call('HSET', meta, 'closed', '0') -- reopened: seqs continue
else
  redis.call('HSET', meta, 'head', 0, 'first', 1, 'closed', '0', 'te', '')
  redis.call('SADD', KEYS[2], name)
end
return ok(n)
