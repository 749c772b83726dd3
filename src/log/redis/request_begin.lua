-- request_begin.lua - an HSETNX-like create of a request record (after
-- token.lua). KEYS sess, record, started, reqs. ARGV token(1-3), 4 started
-- member, 5 key, 6 ms, 7.. field/value pairs.
if redis.call('EXISTS', KEYS[1]) == 0 then return {TIDEMARK_ENOTFOUND} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {TIDEMARK_EEXIST} end
redis.call('HSET', KEYS[2], 'state', '1', 'updated_ms', ARGV[6], unpack(ARGV, 7))
redis.call('SADD', KEYS[3], ARGV[4])
redis.call('SADD', KEYS[4], ARGV[5])
return ok(0)
