
if KEYS[3] then
  local c = redis.pcall('INCR', KEYS[3])
  if type(c) == 'table' and c.err then return {-1} end
end
local st = redis.call('TYPE', KEYS[1])['ok']
if st ~= 'string' and st ~= 'none' then return {-1} end
local ht = redis.call('TYPE', KEYS[2])['ok']
if ht ~= 'hash' and ht ~= 'none' then return {-1} end
local cur = 0
if st == 'string' then
  local s = redis.call('GET', KEYS[1])
  if not (s == '0' or string.match(s, '^%-?[1-9]%d*$')) or #s > 17 then return {-1} end
  cur = tonumber(s)
  if math.abs(cur) >= 9007199254740992 then return {-1} end
end
local seq = tonumber(ARGV[2])
local last, net = 0, 0
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if rec then
  local s, g, h = string.match(rec, '^(%d+) (%d+) (%-?%d+)$')
  if not s or #rec > 52 then return {-1} end
  last, net, g = tonumber(s), tonumber(h), tonumber(g)
  if last >= 9007199254740992 or g >= 9007199254740992 or math.abs(net) >= 9007199254740992 then
    return {-1}
  end
  if seq == last then
    -- A write (the same record), so that a WAITAOF on this connection,
    -- which waits for this connection's own writes only, covers the
    -- original run too (it may have been on a connection now dropped).
    redis.call('HSET', KEYS[2], ARGV[1], rec)
    return {0, g, cur, 0}
  end
  if seq < last then return {-2, last} end
end
local lost = seq - last - 1
local n = tonumber(ARGV[4])
local g = n
if ARGV[3] == 't' then
  g = math.min(n, math.max(cur, 0))
  if g > 0 then redis.call('DECRBY', KEYS[1], g) end
  net = net + g
  cur = cur - g
else
  if ARGV[3] == 'a' and cur + n >= 9007199254740992 then return {-3, cur} end
  if n > 0 then redis.call('INCRBY', KEYS[1], n) end
  if ARGV[3] == 'r' then net = net - n end
  cur = cur + n
end
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d %d %d', seq, g, net))
return {1, g, cur, lost}
