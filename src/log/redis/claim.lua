-- claim.lua - move a started record to this node if its node's lease lapsed,
-- or (ARGV[3] '1', adopt) whoever's it is: the caller won the right to run
-- it another way. One script: two survivors cannot both take it. Sent with
-- EVAL (not loaded). KEYS record. ARGV this node, lease key prefix, adopt.
local h = redis.call('HMGET', KEYS[1], 'state', 'node')
if not h[1] then return TIDEMARK_ENOTFOUND end
if h[1] ~= '1' then return TIDEMARK_EBUSY end
if ARGV[3] ~= '1' then
  if h[2] == ARGV[1] then return TIDEMARK_EBUSY end -- running here
  if h[2] and redis.call('EXISTS', ARGV[2] .. h[2]) == 1 then return TIDEMARK_EBUSY end
end
redis.call('HSET', KEYS[1], 'node', ARGV[1])
return 0
