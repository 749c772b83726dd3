-- close.lua - close a stream (idempotent). KEYS meta. ARGV channel, writer,
-- name, session.
local h = redis.call('HGET', KEYS[1], 'head')
if not h then return {TIDEMARK_ENOTFOUND} end
redis.call('HSET', KEYS[1], 'closed', '1')
redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' ' .. h .. ' 1 ' .. ARGV[3] .. ' ' .. ARGV[4])
return {0, tonumber(h)}
