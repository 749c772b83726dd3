-- helpers.lua - shared helpers, prepended to every script of the Redis store
-- (after the error codes of tidemark.h, as locals: TIDEMARK_ENOTFOUND, ...).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function eid(seq) return string.format('%d-0', seq) end
local function eseq(id) return tonumber(string.match(id, '^(%d+)')) end
local function field(kv, name)
  for i = 1, #kv, 2 do if kv[i] == name then return kv[i + 1] end end
  return false
end
-- Retention by count and age. The trim record (first, te) keeps a gap
-- exact: te is the epoch of seq first-1, the last event trimmed.
local function trim(meta, sk, keep, maxage)
  if keep <= 0 and maxage <= 0 then return end
  local h = redis.call('HMGET', meta, 'head', 'first')
  local head, first = tonumber(h[1]), tonumber(h[2])
  local nf = first
  if keep > 0 and head - nf + 1 > keep then nf = head - keep + 1 end
  if maxage > 0 then
    local cutoff = now_ms() - maxage
    local more, count = true, 1 -- the oldest first: usually not expired
    while more and nf <= head do
      local es = redis.call('XRANGE', sk, eid(nf), '+', 'COUNT', count)
      count = 128
      if #es == 0 then break end
      for _, e in ipairs(es) do
        if tonumber(field(e[2], 't')) >= cutoff then more = false break end
        nf = eseq(e[1]) + 1
      end
    end
  end
  if nf <= first then return end
  local last = redis.call('XRANGE', sk, eid(nf - 1), eid(nf - 1))
  local te = ''
  if last[1] then te = field(last[1][2], 'e') or '' end
  redis.call('XTRIM', sk, 'MINID', eid(nf))
  redis.call('HSET', meta, 'first', nf, 'te', te)
end
local function del_session(id, sessions, started)
  local p = 'tm:{' .. id .. '}:'
  if redis.call('EXISTS', p .. 'sess') == 0 then return false end
  for _, n in ipairs(redis.call('SMEMBERS', p .. 'streams')) do
    redis.call('DEL', p .. 's:' .. n, p .. 'm:' .. n)
  end
  for _, k in ipairs(redis.call('SMEMBERS', p .. 'reqs')) do
    redis.call('DEL', p .. 'q:' .. k)
    redis.call('SREM', started, string.len(id) .. ':' .. id .. k)
  end
  redis.call('DEL', p .. 'sess', p .. 'streams', p .. 'reqs')
  redis.call('ZREM', sessions, id)
  return true
end
