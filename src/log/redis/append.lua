-- append.lua - append one event (after token.lua). KEYS meta, stream,
-- started. ARGV token(1-3), 4 epoch, 5 data, 6 final, 7 keep, 8 max age,
-- 9 expected seq (0: any), 10 request record key or '' (a response that
-- completes it: refused whole when the record is there but finished or
-- another node's, 13 being this node's name, or when it is not there and
-- the append carries rows), 11 started member,
-- 12 channel, 13 writer, 14 stream name, 15 session, 16 effect rows: '' or a
-- JSON array of [table, doc], 17 '1' when this is the batch's last append to
-- the stream: it publishes the stream's head, whatever its outcome (one
-- wake-up per stream per batch, not one per event).
local meta, sk = KEYS[1], KEYS[2]
local function wake(head, closed)
  if ARGV[17] == '1' then
    redis.call('PUBLISH', ARGV[12], ARGV[13] .. ' ' .. string.format('%d', head) .. ' ' ..
                closed .. ' ' .. ARGV[14] .. ' ' .. ARGV[15])
  end
end
local h = redis.call('HMGET', meta, 'head', 'closed')
if not h[1] then return {TIDEMARK_ENOTFOUND} end
if h[2] == '1' then wake(tonumber(h[1]), '1') return {TIDEMARK_ECLOSED} end
local seq = tonumber(h[1]) + 1
local rec = false
if ARGV[10] ~= '' then
  local q = redis.call('HMGET', ARGV[10], 'state', 'node')
  rec = q[1] ~= false
  if rec and (q[1] ~= '1' or (q[2] and q[2] ~= ARGV[13])) then
    wake(seq - 1, '0')
    return {TIDEMARK_EBUSY, seq - 1}
  end
  if not rec and ARGV[16] ~= '' then -- rows no record would say were written
    wake(seq - 1, '0')
    return {TIDEMARK_EIO}
  end
end
local expect = tonumber(ARGV[9])
if expect > 0 and expect ~= seq then
  wake(seq - 1, '0')
  return {TIDEMARK_EBUSY, seq - 1}
end
local t = now_ms()
redis.call('XADD', sk, eid(seq), 'd', ARGV[5], 'e', ARGV[4], 't', t)
redis.call('HSET', meta, 'head', seq)
if ARGV[6] == '1' then redis.call('HSET', meta, 'closed', '1') end
if rec then
  redis.call('HSET', ARGV[10], 'state', '2', 'response', ARGV[5], 'updated_ms', t)
  redis.call('SREM', KEYS[3], ARGV[11])
end
if ARGV[16] ~= '' then
  for _, row in ipairs(cjson.decode(ARGV[16])) do
    local id = redis.call('HINCRBY', 'tm:rowid', row[1], 1)
    redis.call('XADD', 'tm:rows:' .. row[1], eid(id), 'doc', row[2])
  end
end
trim(meta, sk, tonumber(ARGV[7]), tonumber(ARGV[8]))
wake(seq, ARGV[6])
return ok(seq)
