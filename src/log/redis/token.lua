-- token.lua - prepended to the scripts whose ARGV starts with (token hash,
-- token, retry): a retry whose token has a recorded result returns it instead
-- of running again; ok(v) records v under the token and returns {0, v}.
if ARGV[3] == '1' then
  local r = redis.call('HGET', ARGV[1], ARGV[2])
  if r then return {0, tonumber(r), 1} end
end
local function ok(v) redis.call('HSET', ARGV[1], ARGV[2], v) return {0, v} end
