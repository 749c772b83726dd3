-- expire.lua - delete idle sessions. KEYS sessions, started. ARGV before_ms,
-- limit. Returns the ids deleted.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0,
                       tonumber(ARGV[2]))
for _, id in ipairs(ids) do del_session(id, KEYS[1], KEYS[2]) end
return ids
