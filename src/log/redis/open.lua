-- open.lua - create the next POST stream (name '') or create / reopen the
-- standalone one, or create a POST stream whose number this node reserved
-- (after token.lua). KEYS sess, streams. ARGV token(1-3), 4 key prefix,
-- 5 name, 6 (name '') how many numbers to take: r<n> is opened, n+1 ..
-- n+count-1 are the caller's to open later, 7 '1' when name is such a
-- reserved POST stream: it must not exist yet. Returns n of r<n> (0 for "g",
-- or the reserved stream's).
if redis.call('EXISTS', KEYS[1]) == 0 then return {TIDEMARK_ENOTFOUND} end
local name, n, fresh = ARGV[5], 0, ARGV[7] == '1'
if name == '' then
  local count = tonumber(ARGV[6]) or 1
  if count < 1 then count = 1 end
  n = tonumber(redis.call('HGET', KEYS[1], 'next_r') or '1')
  redis.call('HSET', KEYS[1], 'next_r', n + count)
  name = 'r' .. string.format('%d', n)
  fresh = true
elseif fresh then
  n = tonumber(string.sub(name, 2)) or 0
end
local meta = ARGV[4] .. 'm:' .. name
if redis.call('EXISTS', meta) == 1 then
  if fresh then return {TIDEMARK_EEXIST} end -- a POST stream's number is never reused
  redis.call('HSET', meta, 'closed', '0') -- reopened: seqs continue
else
  redis.call('HSET', meta, 'head', 0, 'first', 1, 'closed', '0', 'te', '')
  redis.call('SADD', KEYS[2], name)
end
return ok(n)
