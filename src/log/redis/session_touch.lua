-- session_touch.lua - note a session's last use (idempotent). KEYS sess,
-- sessions. ARGV ms, id.
if redis.call('EXISTS', KEYS[1]) == 0 then return {TIDEMARK_ENOTFOUND} end
redis.call('HSET', KEYS[1], 'last_seen_ms', ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return {0, 0}
