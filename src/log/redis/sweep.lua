-- sweep.lua - age retention of idle streams. KEYS meta1, stream1, ...
-- ARGV max age.
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then trim(KEYS[i], KEYS[i + 1], 0, tonumber(ARGV[1])) end
end
return {0}
