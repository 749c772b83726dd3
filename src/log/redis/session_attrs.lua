-- session_attrs.lua - set or remove one session attribute (idempotent).
-- KEYS sess. ARGV field, value, '1' to delete.
if redis.call('EXISTS', KEYS[1]) == 0 then return {TIDEMARK_ENOTFOUND} end
if ARGV[3] == '1' then redis.call('HDEL', KEYS[1], ARGV[1])
else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return {0, 0}
