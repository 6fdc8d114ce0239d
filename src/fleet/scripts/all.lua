
local out = {}
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    if string.sub(k, 1, #ARGV[2]) ~= ARGV[2] and redis.call('TYPE', k)['ok'] == 'string' then
      local v = redis.call('GET', k)
      if v == '0' or string.match(v, '^%-?[1-9]%d*$') then
        out[#out + 1] = k
        out[#out + 1] = v
      end
    end
  end
until cursor == '0'
return out
