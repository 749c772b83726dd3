-- session_create.lua - make a session (after token.lua). KEYS sess,
-- sessions. ARGV token(1-3), 4 id, 5 last_seen_ms, 6.. field/value pairs.
if redis.call('EXISTS', KEYS[1]) == 1 then return {TIDEMARK_EEXIST} end
redis.call('HSET', KEYS[1], 'next_r', 1, unpack(ARGV, 6))
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
return ok(0)
