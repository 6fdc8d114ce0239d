
local wt = redis.call('TYPE', KEYS[1])['ok']
if wt ~= 'hash' and wt ~= 'none' then return {4} end
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local last = 0
if raw then
  -- Digits only: tonumber would also read 'inf', '0x10' or '1e3'.
  if not (raw == '0' or string.match(raw, '^[1-9]%d*$')) or #raw > 16 then return {4} end
  last = tonumber(raw)
  if last >= 9007199254740992 then return {4} end
end
local seq = tonumber(ARGV[2])
if seq <= last then return {0, last} end
if seq ~= last + 1 then return {2, last} end
local bad = {}
local cur = {}
local seen = {}
for s = 2, #KEYS, 1000 do
  local part = redis.call('MGET', unpack(KEYS, s, math.min(s + 999, #KEYS)))
  for j = 1, #part do cur[s - 2 + j] = part[j] end
end
for i = 2, #KEYS do
  local v = cur[i - 1]
  local d = tonumber(ARGV[i + 1])
  if KEYS[i] == KEYS[1] or seen[KEYS[i]] then
    bad[#bad + 1] = i - 1
  elseif v then
    local n = tonumber(v)
    if not (v == '0' or string.match(v, '^%-?[1-9]%d*$')) or not n or math.abs(n + d) > 9.2e18 then
      bad[#bad + 1] = i - 1
    end
  elseif redis.call('EXISTS', KEYS[i]) == 1 or math.abs(d) > 9.2e18 then
    bad[#bad + 1] = i - 1
  end
  seen[KEYS[i]] = true
end
if #bad > 0 then
  table.insert(bad, 1, 3)
  return bad
end
for i = 2, #KEYS do
  redis.call('INCRBY', KEYS[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return {1}
