
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
if t == 'string' then return 0 end
return -1
